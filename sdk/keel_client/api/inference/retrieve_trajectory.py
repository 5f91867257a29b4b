from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trajectory_public import TrajectoryPublic
from ...types import Response


def _get_kwargs(
    trajectory_id: str,
) -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/trajectories/{trajectory_id}".format(
            trajectory_id=quote(str(trajectory_id), safe=""),
        ),
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrajectoryPublic | None:
    if response.status_code == 200:
        response_200 = TrajectoryPublic.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())

        return response_404

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | TrajectoryPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[Problem | TrajectoryPublic]:
    """Retrieve a trajectory

     A trajectory's recorded calls (token ids and log-probs, oldest first) and its outcome.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrajectoryPublic]
    """

    kwargs = _get_kwargs(
        trajectory_id=trajectory_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
) -> Problem | TrajectoryPublic | None:
    """Retrieve a trajectory

     A trajectory's recorded calls (token ids and log-probs, oldest first) and its outcome.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrajectoryPublic
    """

    return sync_detailed(
        trajectory_id=trajectory_id,
        client=client,
    ).parsed


async def asyncio_detailed(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
) -> Response[Problem | TrajectoryPublic]:
    """Retrieve a trajectory

     A trajectory's recorded calls (token ids and log-probs, oldest first) and its outcome.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrajectoryPublic]
    """

    kwargs = _get_kwargs(
        trajectory_id=trajectory_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
) -> Problem | TrajectoryPublic | None:
    """Retrieve a trajectory

     A trajectory's recorded calls (token ids and log-probs, oldest first) and its outcome.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrajectoryPublic
    """

    return (
        await asyncio_detailed(
            trajectory_id=trajectory_id,
            client=client,
        )
    ).parsed
