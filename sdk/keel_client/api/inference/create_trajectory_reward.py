from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.trajectory_reward_create import TrajectoryRewardCreate
from ...models.trajectory_summary import TrajectorySummary
from ...types import Response


def _get_kwargs(
    trajectory_id: str,
    *,
    body: TrajectoryRewardCreate,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/trajectories/{trajectory_id}/reward".format(
            trajectory_id=quote(str(trajectory_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | TrajectorySummary | None:
    if response.status_code == 200:
        response_200 = TrajectorySummary.from_dict(response.json())

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

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())

        return response_409

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | TrajectorySummary]:
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
    body: TrajectoryRewardCreate,
) -> Response[Problem | TrajectorySummary]:
    """Score a trajectory

     Record a trajectory's reward (and group); 404 when the project recorded no call under the id.
    Posting again replaces the outcome until a training job takes the trajectory, then a different
    reward is a 409 `trajectory_consumed`.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.
        body (TrajectoryRewardCreate): A finished trajectory's outcome.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrajectorySummary]
    """

    kwargs = _get_kwargs(
        trajectory_id=trajectory_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
    body: TrajectoryRewardCreate,
) -> Problem | TrajectorySummary | None:
    """Score a trajectory

     Record a trajectory's reward (and group); 404 when the project recorded no call under the id.
    Posting again replaces the outcome until a training job takes the trajectory, then a different
    reward is a 409 `trajectory_consumed`.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.
        body (TrajectoryRewardCreate): A finished trajectory's outcome.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrajectorySummary
    """

    return sync_detailed(
        trajectory_id=trajectory_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
    body: TrajectoryRewardCreate,
) -> Response[Problem | TrajectorySummary]:
    """Score a trajectory

     Record a trajectory's reward (and group); 404 when the project recorded no call under the id.
    Posting again replaces the outcome until a training job takes the trajectory, then a different
    reward is a 409 `trajectory_consumed`.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.
        body (TrajectoryRewardCreate): A finished trajectory's outcome.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | TrajectorySummary]
    """

    kwargs = _get_kwargs(
        trajectory_id=trajectory_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    trajectory_id: str,
    *,
    client: AuthenticatedClient,
    body: TrajectoryRewardCreate,
) -> Problem | TrajectorySummary | None:
    """Score a trajectory

     Record a trajectory's reward (and group); 404 when the project recorded no call under the id.
    Posting again replaces the outcome until a training job takes the trajectory, then a different
    reward is a 409 `trajectory_consumed`.

    Args:
        trajectory_id (str): The `trajectory_id` the agent's calls carried in `extra_body`.
        body (TrajectoryRewardCreate): A finished trajectory's outcome.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | TrajectorySummary
    """

    return (
        await asyncio_detailed(
            trajectory_id=trajectory_id,
            client=client,
            body=body,
        )
    ).parsed
