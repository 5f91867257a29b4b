from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.job_metrics_public import JobMetricsPublic
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: str,
    *,
    names: list[str] | None | Unset = UNSET,
    max_points: int | Unset = 500,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_names: list[str] | None | Unset
    if isinstance(names, Unset):
        json_names = UNSET
    elif isinstance(names, list):
        json_names = names

    else:
        json_names = names
    params["names"] = json_names

    params["max_points"] = max_points

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/jobs/{job_id}/metrics".format(
            job_id=quote(str(job_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> JobMetricsPublic | Problem | None:
    if response.status_code == 200:
        response_200 = JobMetricsPublic.from_dict(response.json())

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
) -> Response[JobMetricsPublic | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    job_id: str,
    *,
    client: AuthenticatedClient,
    names: list[str] | None | Unset = UNSET,
    max_points: int | Unset = 500,
) -> Response[JobMetricsPublic | Problem]:
    """List job metrics

     Time series per metric name (step, value), from the job's metrics events.

    Args:
        job_id (str):
        names (list[str] | None | Unset): Only these metrics (repeat the parameter, or separate
            names with commas).
        max_points (int | Unset): Longer series are downsampled to this many evenly spaced points.
            Default: 500.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobMetricsPublic | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        names=names,
        max_points=max_points,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: str,
    *,
    client: AuthenticatedClient,
    names: list[str] | None | Unset = UNSET,
    max_points: int | Unset = 500,
) -> JobMetricsPublic | Problem | None:
    """List job metrics

     Time series per metric name (step, value), from the job's metrics events.

    Args:
        job_id (str):
        names (list[str] | None | Unset): Only these metrics (repeat the parameter, or separate
            names with commas).
        max_points (int | Unset): Longer series are downsampled to this many evenly spaced points.
            Default: 500.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobMetricsPublic | Problem
    """

    return sync_detailed(
        job_id=job_id,
        client=client,
        names=names,
        max_points=max_points,
    ).parsed


async def asyncio_detailed(
    job_id: str,
    *,
    client: AuthenticatedClient,
    names: list[str] | None | Unset = UNSET,
    max_points: int | Unset = 500,
) -> Response[JobMetricsPublic | Problem]:
    """List job metrics

     Time series per metric name (step, value), from the job's metrics events.

    Args:
        job_id (str):
        names (list[str] | None | Unset): Only these metrics (repeat the parameter, or separate
            names with commas).
        max_points (int | Unset): Longer series are downsampled to this many evenly spaced points.
            Default: 500.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobMetricsPublic | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        names=names,
        max_points=max_points,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: str,
    *,
    client: AuthenticatedClient,
    names: list[str] | None | Unset = UNSET,
    max_points: int | Unset = 500,
) -> JobMetricsPublic | Problem | None:
    """List job metrics

     Time series per metric name (step, value), from the job's metrics events.

    Args:
        job_id (str):
        names (list[str] | None | Unset): Only these metrics (repeat the parameter, or separate
            names with commas).
        max_points (int | Unset): Longer series are downsampled to this many evenly spaced points.
            Default: 500.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobMetricsPublic | Problem
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            client=client,
            names=names,
            max_points=max_points,
        )
    ).parsed
