from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trainer_create import TrainerCreate
from ...models.trainer_public import TrainerPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: TrainerCreate,
    idempotency_key: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/trainers",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerPublic | None:
    if response.status_code == 201:
        response_201 = TrainerPublic.from_dict(response.json())

        return response_201

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
) -> Response[Problem | TrainerPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: TrainerCreate,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[Problem | TrainerPublic]:
    """Create a trainer

     Create a trainer on a base model (LoRA or full fine-tuning). Its Ray actor starts with the first
    primitive call, is released after `idle_timeout_s` without calls (its state saved first) and
    restored
    on the next call.

    Args:
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (TrainerCreate): A trainer: a base model held by an actor, trained by your own loop
            through the primitives.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerPublic]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: TrainerCreate,
    idempotency_key: None | str | Unset = UNSET,
) -> Problem | TrainerPublic | None:
    """Create a trainer

     Create a trainer on a base model (LoRA or full fine-tuning). Its Ray actor starts with the first
    primitive call, is released after `idle_timeout_s` without calls (its state saved first) and
    restored
    on the next call.

    Args:
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (TrainerCreate): A trainer: a base model held by an actor, trained by your own loop
            through the primitives.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerPublic
    """

    return sync_detailed(
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: TrainerCreate,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[Problem | TrainerPublic]:
    """Create a trainer

     Create a trainer on a base model (LoRA or full fine-tuning). Its Ray actor starts with the first
    primitive call, is released after `idle_timeout_s` without calls (its state saved first) and
    restored
    on the next call.

    Args:
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (TrainerCreate): A trainer: a base model held by an actor, trained by your own loop
            through the primitives.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerPublic]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: TrainerCreate,
    idempotency_key: None | str | Unset = UNSET,
) -> Problem | TrainerPublic | None:
    """Create a trainer

     Create a trainer on a base model (LoRA or full fine-tuning). Its Ray actor starts with the first
    primitive call, is released after `idle_timeout_s` without calls (its state saved first) and
    restored
    on the next call.

    Args:
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (TrainerCreate): A trainer: a base model held by an actor, trained by your own loop
            through the primitives.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerPublic
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
