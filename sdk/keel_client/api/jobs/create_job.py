from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.job_create import JobCreate
from ...models.job_public import JobPublic
from ...models.memory_plan import MemoryPlan
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: JobCreate,
    dry_run: bool | Unset = False,
    idempotency_key: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    params: dict[str, Any] = {}

    params["dry_run"] = dry_run

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/jobs",
        "params": params,
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> JobPublic | MemoryPlan | Problem | None:
    if response.status_code == 200:
        response_200 = MemoryPlan.from_dict(response.json())

        return response_200

    if response.status_code == 201:
        response_201 = JobPublic.from_dict(response.json())

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
) -> Response[JobPublic | MemoryPlan | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: JobCreate,
    dry_run: bool | Unset = False,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[JobPublic | MemoryPlan | Problem]:
    """Create a job

     Validate a training job, queue it, and return it. A job whose memory plan cannot fit its devices
    is a 422 `will_not_fit`; `dry_run=true` returns the plan instead.

    Args:
        dry_run (bool | Unset): Validate the job and return its memory plan (200, `MemoryPlan`:
            estimated bytes per worker) without creating, queueing or remembering anything. Default:
            False.
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobCreate): A training job: a base model, a dataset, and a method with its
            hyperparameters.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobPublic | MemoryPlan | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: JobCreate,
    dry_run: bool | Unset = False,
    idempotency_key: None | str | Unset = UNSET,
) -> JobPublic | MemoryPlan | Problem | None:
    """Create a job

     Validate a training job, queue it, and return it. A job whose memory plan cannot fit its devices
    is a 422 `will_not_fit`; `dry_run=true` returns the plan instead.

    Args:
        dry_run (bool | Unset): Validate the job and return its memory plan (200, `MemoryPlan`:
            estimated bytes per worker) without creating, queueing or remembering anything. Default:
            False.
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobCreate): A training job: a base model, a dataset, and a method with its
            hyperparameters.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobPublic | MemoryPlan | Problem
    """

    return sync_detailed(
        client=client,
        body=body,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: JobCreate,
    dry_run: bool | Unset = False,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[JobPublic | MemoryPlan | Problem]:
    """Create a job

     Validate a training job, queue it, and return it. A job whose memory plan cannot fit its devices
    is a 422 `will_not_fit`; `dry_run=true` returns the plan instead.

    Args:
        dry_run (bool | Unset): Validate the job and return its memory plan (200, `MemoryPlan`:
            estimated bytes per worker) without creating, queueing or remembering anything. Default:
            False.
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobCreate): A training job: a base model, a dataset, and a method with its
            hyperparameters.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobPublic | MemoryPlan | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
        dry_run=dry_run,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: JobCreate,
    dry_run: bool | Unset = False,
    idempotency_key: None | str | Unset = UNSET,
) -> JobPublic | MemoryPlan | Problem | None:
    """Create a job

     Validate a training job, queue it, and return it. A job whose memory plan cannot fit its devices
    is a 422 `will_not_fit`; `dry_run=true` returns the plan instead.

    Args:
        dry_run (bool | Unset): Validate the job and return its memory plan (200, `MemoryPlan`:
            estimated bytes per worker) without creating, queueing or remembering anything. Default:
            False.
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobCreate): A training job: a base model, a dataset, and a method with its
            hyperparameters.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobPublic | MemoryPlan | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            dry_run=dry_run,
            idempotency_key=idempotency_key,
        )
    ).parsed
