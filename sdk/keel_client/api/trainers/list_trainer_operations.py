from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trainer_operations_public import TrainerOperationsPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    trainer_id: str,
    *,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["limit"] = limit

    json_after: None | str | Unset
    if isinstance(after, Unset):
        json_after = UNSET
    else:
        json_after = after
    params["after"] = json_after

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trainers/{trainer_id}/operations".format(
            trainer_id=quote(str(trainer_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerOperationsPublic | None:
    if response.status_code == 200:
        response_200 = TrainerOperationsPublic.from_dict(response.json())

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
) -> Response[Problem | TrainerOperationsPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
) -> Response[Problem | TrainerOperationsPublic]:
    """List trainer operations

     The trainer's operations, newest first, with the tokens each processed.

    Args:
        trainer_id (str):
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationsPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        limit=limit,
        after=after,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
) -> Problem | TrainerOperationsPublic | None:
    """List trainer operations

     The trainer's operations, newest first, with the tokens each processed.

    Args:
        trainer_id (str):
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationsPublic
    """

    return sync_detailed(
        trainer_id=trainer_id,
        client=client,
        limit=limit,
        after=after,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
) -> Response[Problem | TrainerOperationsPublic]:
    """List trainer operations

     The trainer's operations, newest first, with the tokens each processed.

    Args:
        trainer_id (str):
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationsPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        limit=limit,
        after=after,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
) -> Problem | TrainerOperationsPublic | None:
    """List trainer operations

     The trainer's operations, newest first, with the tokens each processed.

    Args:
        trainer_id (str):
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationsPublic
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            client=client,
            limit=limit,
            after=after,
        )
    ).parsed
