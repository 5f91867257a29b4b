from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.save_request import SaveRequest
from ...models.trainer_operation_public import TrainerOperationPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    trainer_id: str,
    *,
    body: SaveRequest,
    idempotency_key: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/trainers/{trainer_id}/save_weights_for_sampler".format(
            trainer_id=quote(str(trainer_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerOperationPublic | None:
    if response.status_code == 202:
        response_202 = TrainerOperationPublic.from_dict(response.json())

        return response_202

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

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
) -> Response[Problem | TrainerOperationPublic]:
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
    body: SaveRequest,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[Problem | TrainerOperationPublic]:
    """Save weights for sampling

     Save the current weights only (no optimizer state): `sample` from them with `sampler_path`, or use
    them as a model.

    Args:
        trainer_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (SaveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    body: SaveRequest,
    idempotency_key: None | str | Unset = UNSET,
) -> Problem | TrainerOperationPublic | None:
    """Save weights for sampling

     Save the current weights only (no optimizer state): `sample` from them with `sampler_path`, or use
    them as a model.

    Args:
        trainer_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (SaveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationPublic
    """

    return sync_detailed(
        trainer_id=trainer_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    body: SaveRequest,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[Problem | TrainerOperationPublic]:
    """Save weights for sampling

     Save the current weights only (no optimizer state): `sample` from them with `sampler_path`, or use
    them as a model.

    Args:
        trainer_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (SaveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
    body: SaveRequest,
    idempotency_key: None | str | Unset = UNSET,
) -> Problem | TrainerOperationPublic | None:
    """Save weights for sampling

     Save the current weights only (no optimizer state): `sample` from them with `sampler_path`, or use
    them as a model.

    Args:
        trainer_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (SaveRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationPublic
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
