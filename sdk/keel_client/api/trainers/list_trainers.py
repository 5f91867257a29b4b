from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.list_trainers_status_type_0 import ListTrainersStatusType0
from ...models.problem import Problem
from ...models.trainers_public import TrainersPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    status: ListTrainersStatusType0 | None | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["limit"] = limit

    json_after: None | str | Unset
    if isinstance(after, Unset):
        json_after = UNSET
    else:
        json_after = after
    params["after"] = json_after

    json_status: None | str | Unset
    if isinstance(status, Unset):
        json_status = UNSET
    elif isinstance(status, ListTrainersStatusType0):
        json_status = status.value
    else:
        json_status = status
    params["status"] = json_status

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trainers",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainersPublic | None:
    if response.status_code == 200:
        response_200 = TrainersPublic.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

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
) -> Response[Problem | TrainersPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    status: ListTrainersStatusType0 | None | Unset = UNSET,
) -> Response[Problem | TrainersPublic]:
    """List trainers

     The project's trainers, newest first.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        status (ListTrainersStatusType0 | None | Unset): Only trainers in this status.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainersPublic]
    """

    kwargs = _get_kwargs(
        limit=limit,
        after=after,
        status=status,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    status: ListTrainersStatusType0 | None | Unset = UNSET,
) -> Problem | TrainersPublic | None:
    """List trainers

     The project's trainers, newest first.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        status (ListTrainersStatusType0 | None | Unset): Only trainers in this status.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainersPublic
    """

    return sync_detailed(
        client=client,
        limit=limit,
        after=after,
        status=status,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    status: ListTrainersStatusType0 | None | Unset = UNSET,
) -> Response[Problem | TrainersPublic]:
    """List trainers

     The project's trainers, newest first.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        status (ListTrainersStatusType0 | None | Unset): Only trainers in this status.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainersPublic]
    """

    kwargs = _get_kwargs(
        limit=limit,
        after=after,
        status=status,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    status: ListTrainersStatusType0 | None | Unset = UNSET,
) -> Problem | TrainersPublic | None:
    """List trainers

     The project's trainers, newest first.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        status (ListTrainersStatusType0 | None | Unset): Only trainers in this status.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainersPublic
    """

    return (
        await asyncio_detailed(
            client=client,
            limit=limit,
            after=after,
            status=status,
        )
    ).parsed
