from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trainer_public import TrainerPublic
from ...types import Response


def _get_kwargs(
    trainer_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "delete",
        "url": "/v1/trainers/{trainer_id}".format(
            trainer_id=quote(str(trainer_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrainerPublic | None:
    if response.status_code == 200:
        response_200 = TrainerPublic.from_dict(response.json())

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
) -> Response[Problem | TrainerPublic]:
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
) -> Response[Problem | TrainerPublic]:
    """Delete a trainer

     End a trainer: its actor is released without a save (its resources freed), queued operations fail
    with `trainer_deleted`, and later calls are a 409. Models it saved stay. Deleting again changes
    nothing.

    Args:
        trainer_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
) -> Problem | TrainerPublic | None:
    """Delete a trainer

     End a trainer: its actor is released without a save (its resources freed), queued operations fail
    with `trainer_deleted`, and later calls are a 409. Models it saved stay. Deleting again changes
    nothing.

    Args:
        trainer_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerPublic
    """

    return sync_detailed(
        trainer_id=trainer_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[Problem | TrainerPublic]:
    """Delete a trainer

     End a trainer: its actor is released without a save (its resources freed), queued operations fail
    with `trainer_deleted`, and later calls are a 409. Models it saved stay. Deleting again changes
    nothing.

    Args:
        trainer_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrainerPublic]
    """

    kwargs = _get_kwargs(
        trainer_id=trainer_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trainer_id: str,
    *,
    client: AuthenticatedClient,
) -> Problem | TrainerPublic | None:
    """Delete a trainer

     End a trainer: its actor is released without a save (its resources freed), queued operations fail
    with `trainer_deleted`, and later calls are a 409. Models it saved stay. Deleting again changes
    nothing.

    Args:
        trainer_id (str):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrainerPublic
    """

    return (
        await asyncio_detailed(
            trainer_id=trainer_id,
            client=client,
        )
    ).parsed
