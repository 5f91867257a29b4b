from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    trainer_id: str,
    *,
    after: int | Unset = 0,
    last_event_id: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(last_event_id, Unset):
        headers["Last-Event-ID"] = last_event_id

    params: dict[str, Any] = {}

    params["after"] = after

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trainers/{trainer_id}/events/stream".format(
            trainer_id=quote(str(trainer_id), safe=""),
        ),
        "params": params,
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Any | Problem | None:
    if response.status_code == 200:
        response_200 = cast(Any, None)
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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Any | Problem]:
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
    last_event_id: None | str | Unset = UNSET,
) -> Response[Any | Problem]:
    """Stream trainer events

     The trainer's events replayed after the cursor (`Last-Event-ID` or `after`), then live; ends when
    the
    trainer is deleted. Counts against the key's `KEEL_MAX_STREAMS_PER_KEY` like job streams.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        last_event_id (None | str | Unset): Resume after this seq (EventSource sends it on
            reconnect); takes precedence over `after`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Any | Problem]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        after=after,
        last_event_id=last_event_id,
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
    last_event_id: None | str | Unset = UNSET,
) -> Any | Problem | None:
    """Stream trainer events

     The trainer's events replayed after the cursor (`Last-Event-ID` or `after`), then live; ends when
    the
    trainer is deleted. Counts against the key's `KEEL_MAX_STREAMS_PER_KEY` like job streams.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        last_event_id (None | str | Unset): Resume after this seq (EventSource sends it on
            reconnect); takes precedence over `after`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Any | Problem
    """

    return sync_detailed(
        trainer_id=trainer_id,
        client=client,
        after=after,
        last_event_id=last_event_id,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    after: int | Unset = 0,
    last_event_id: None | str | Unset = UNSET,
) -> Response[Any | Problem]:
    """Stream trainer events

     The trainer's events replayed after the cursor (`Last-Event-ID` or `after`), then live; ends when
    the
    trainer is deleted. Counts against the key's `KEEL_MAX_STREAMS_PER_KEY` like job streams.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        last_event_id (None | str | Unset): Resume after this seq (EventSource sends it on
            reconnect); takes precedence over `after`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Any | Problem]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        after=after,
        last_event_id=last_event_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    after: int | Unset = 0,
    last_event_id: None | str | Unset = UNSET,
) -> Any | Problem | None:
    """Stream trainer events

     The trainer's events replayed after the cursor (`Last-Event-ID` or `after`), then live; ends when
    the
    trainer is deleted. Counts against the key's `KEEL_MAX_STREAMS_PER_KEY` like job streams.

    Args:
        trainer_id (str):
        after (int | Unset): Return events with a larger `seq` than this. Default: 0.
        last_event_id (None | str | Unset): Resume after this seq (EventSource sends it on
            reconnect); takes precedence over `after`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Any | Problem
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            client=client,
            after=after,
            last_event_id=last_event_id,
        )
    ).parsed
