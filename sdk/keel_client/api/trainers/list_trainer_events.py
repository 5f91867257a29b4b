from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trainer_events_public import TrainerEventsPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    trainer_id: str,
    *,
    after: int | Unset = 0,
    limit: int | Unset = 100,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["after"] = after

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trainers/{trainer_id}/events".format(
            trainer_id=quote(str(trainer_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerEventsPublic | None:
    if response.status_code == 200:
        response_200 = TrainerEventsPublic.from_dict(response.json())

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
) -> Response[Problem | TrainerEventsPublic]:
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
    after: int | Unset = 0,
    limit: int | Unset = 100,
) -> Response[Problem | TrainerEventsPublic]:
    """List trainer events

     The trainer's events oldest first, after the `seq` cursor `after`: every call (with the tokens it
    processed), status changes, saved models and warnings.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        limit (int | Unset): Page size (1-1000). Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerEventsPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        after=after,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    after: int | Unset = 0,
    limit: int | Unset = 100,
) -> Problem | TrainerEventsPublic | None:
    """List trainer events

     The trainer's events oldest first, after the `seq` cursor `after`: every call (with the tokens it
    processed), status changes, saved models and warnings.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        limit (int | Unset): Page size (1-1000). Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerEventsPublic
    """

    return sync_detailed(
        trainer_id=trainer_id,
        client=client,
        after=after,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    after: int | Unset = 0,
    limit: int | Unset = 100,
) -> Response[Problem | TrainerEventsPublic]:
    """List trainer events

     The trainer's events oldest first, after the `seq` cursor `after`: every call (with the tokens it
    processed), status changes, saved models and warnings.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        limit (int | Unset): Page size (1-1000). Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerEventsPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        after=after,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    after: int | Unset = 0,
    limit: int | Unset = 100,
) -> Problem | TrainerEventsPublic | None:
    """List trainer events

     The trainer's events oldest first, after the `seq` cursor `after`: every call (with the tokens it
    processed), status changes, saved models and warnings.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        limit (int | Unset): Page size (1-1000). Default: 100.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerEventsPublic
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            client=client,
            after=after,
            limit=limit,
        )
    ).parsed
