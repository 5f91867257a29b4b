from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.checkpoint_public import CheckpointPublic
from ...models.problem import Problem
from ...types import Response


def _get_kwargs(
    checkpoint_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/checkpoints/{checkpoint_id}".format(
            checkpoint_id=quote(str(checkpoint_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> CheckpointPublic | Problem | None:
    if response.status_code == 200:
        response_200 = CheckpointPublic.from_dict(response.json())

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
) -> Response[CheckpointPublic | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[CheckpointPublic | Problem]:
    """Retrieve a checkpoint

     One checkpoint.

    Args:
        checkpoint_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CheckpointPublic | Problem]
    """

    kwargs = _get_kwargs(
        checkpoint_id=checkpoint_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
) -> CheckpointPublic | Problem | None:
    """Retrieve a checkpoint

     One checkpoint.

    Args:
        checkpoint_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CheckpointPublic | Problem
    """

    return sync_detailed(
        checkpoint_id=checkpoint_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[CheckpointPublic | Problem]:
    """Retrieve a checkpoint

     One checkpoint.

    Args:
        checkpoint_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[CheckpointPublic | Problem]
    """

    kwargs = _get_kwargs(
        checkpoint_id=checkpoint_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
) -> CheckpointPublic | Problem | None:
    """Retrieve a checkpoint

     One checkpoint.

    Args:
        checkpoint_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        CheckpointPublic | Problem
    """

    return (
        await asyncio_detailed(
            checkpoint_id=checkpoint_id,
            client=client,
        )
    ).parsed
