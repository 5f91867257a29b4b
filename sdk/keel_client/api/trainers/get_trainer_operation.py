from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trainer_operation_public import TrainerOperationPublic
from ...types import UNSET, Response, Unset


def _get_kwargs(
    trainer_id: str,
    operation_id: str,
    *,
    wait: float | Unset = 0.0,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["wait"] = wait

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trainers/{trainer_id}/operations/{operation_id}".format(
            trainer_id=quote(str(trainer_id), safe=""),
            operation_id=quote(str(operation_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerOperationPublic | None:
    if response.status_code == 200:
        response_200 = TrainerOperationPublic.from_dict(response.json())

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
) -> Response[Problem | TrainerOperationPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    trainer_id: str,
    operation_id: str,
    *,
    client: AuthenticatedClient,
    wait: float | Unset = 0.0,
) -> Response[Problem | TrainerOperationPublic]:
    """Retrieve a trainer operation

     One operation: `queued`, `running`, then `succeeded` with its `result` or `failed` with its `error`.

    Args:
        trainer_id (str):
        operation_id (str):
        wait (float | Unset): Seconds to wait for the operation to finish before answering (a
            long-poll); 0 answers at once. Default: 0.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        operation_id=operation_id,
        wait=wait,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trainer_id: str,
    operation_id: str,
    *,
    client: AuthenticatedClient,
    wait: float | Unset = 0.0,
) -> Problem | TrainerOperationPublic | None:
    """Retrieve a trainer operation

     One operation: `queued`, `running`, then `succeeded` with its `result` or `failed` with its `error`.

    Args:
        trainer_id (str):
        operation_id (str):
        wait (float | Unset): Seconds to wait for the operation to finish before answering (a
            long-poll); 0 answers at once. Default: 0.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationPublic
    """

    return sync_detailed(
        trainer_id=trainer_id,
        operation_id=operation_id,
        client=client,
        wait=wait,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    operation_id: str,
    *,
    client: AuthenticatedClient,
    wait: float | Unset = 0.0,
) -> Response[Problem | TrainerOperationPublic]:
    """Retrieve a trainer operation

     One operation: `queued`, `running`, then `succeeded` with its `result` or `failed` with its `error`.

    Args:
        trainer_id (str):
        operation_id (str):
        wait (float | Unset): Seconds to wait for the operation to finish before answering (a
            long-poll); 0 answers at once. Default: 0.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerOperationPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
        operation_id=operation_id,
        wait=wait,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    operation_id: str,
    *,
    client: AuthenticatedClient,
    wait: float | Unset = 0.0,
) -> Problem | TrainerOperationPublic | None:
    """Retrieve a trainer operation

     One operation: `queued`, `running`, then `succeeded` with its `result` or `failed` with its `error`.

    Args:
        trainer_id (str):
        operation_id (str):
        wait (float | Unset): Seconds to wait for the operation to finish before answering (a
            long-poll); 0 answers at once. Default: 0.0.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerOperationPublic
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            operation_id=operation_id,
            client=client,
            wait=wait,
        )
    ).parsed
