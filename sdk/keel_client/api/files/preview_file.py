from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.file_preview import FilePreview
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    file_id: str,
    *,
    limit: int | Unset = 5,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/files/{file_id}/preview".format(
            file_id=quote(str(file_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> FilePreview | Problem | None:
    if response.status_code == 200:
        response_200 = FilePreview.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 422:
        response_422 = Problem.from_dict(response.json())

        return response_422

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[FilePreview | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    file_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 5,
) -> Response[FilePreview | Problem]:
    """Preview a file

     Return the first rows of a file as JSON (the purpose's columns only).

    Args:
        file_id (str):
        limit (int | Unset): Rows (1-100). Default: 5.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[FilePreview | Problem]
    """

    kwargs = _get_kwargs(
        file_id=file_id,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    file_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 5,
) -> FilePreview | Problem | None:
    """Preview a file

     Return the first rows of a file as JSON (the purpose's columns only).

    Args:
        file_id (str):
        limit (int | Unset): Rows (1-100). Default: 5.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        FilePreview | Problem
    """

    return sync_detailed(
        file_id=file_id,
        client=client,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    file_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 5,
) -> Response[FilePreview | Problem]:
    """Preview a file

     Return the first rows of a file as JSON (the purpose's columns only).

    Args:
        file_id (str):
        limit (int | Unset): Rows (1-100). Default: 5.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[FilePreview | Problem]
    """

    kwargs = _get_kwargs(
        file_id=file_id,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    file_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 5,
) -> FilePreview | Problem | None:
    """Preview a file

     Return the first rows of a file as JSON (the purpose's columns only).

    Args:
        file_id (str):
        limit (int | Unset): Rows (1-100). Default: 5.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        FilePreview | Problem
    """

    return (
        await asyncio_detailed(
            file_id=file_id,
            client=client,
            limit=limit,
        )
    ).parsed
