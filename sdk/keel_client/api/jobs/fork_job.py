from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.job_fork import JobFork
from ...models.job_public import JobPublic
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: str,
    *,
    body: JobFork,
    idempotency_key: None | str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/jobs/{job_id}/fork".format(
            job_id=quote(str(job_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> JobPublic | Problem | None:
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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[JobPublic | Problem]:
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
    body: JobFork,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[JobPublic | Problem]:
    """Fork a job from a checkpoint

     Queue a new job that starts from a checkpoint of this one (its weights, optimizer state and data
    position, as a resume would) and runs the rest of the parent's request, with `hyperparameters`
    merged
    over the parent's. The new job's `forked_from` names the parent and the checkpoint. A checkpoint of
    another job is a 422 `invalid_checkpoint`; overrides that fail validation are 422s at their
    `hyperparameters.` path.

    Args:
        job_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobFork): Start a new job from a checkpoint of this one: its weights, optimizer
            state and data position, as
            a resume would. The new job runs the parent's request (model, files, method, seed,
            resources).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobPublic | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: str,
    *,
    client: AuthenticatedClient,
    body: JobFork,
    idempotency_key: None | str | Unset = UNSET,
) -> JobPublic | Problem | None:
    """Fork a job from a checkpoint

     Queue a new job that starts from a checkpoint of this one (its weights, optimizer state and data
    position, as a resume would) and runs the rest of the parent's request, with `hyperparameters`
    merged
    over the parent's. The new job's `forked_from` names the parent and the checkpoint. A checkpoint of
    another job is a 422 `invalid_checkpoint`; overrides that fail validation are 422s at their
    `hyperparameters.` path.

    Args:
        job_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobFork): Start a new job from a checkpoint of this one: its weights, optimizer
            state and data position, as
            a resume would. The new job runs the parent's request (model, files, method, seed,
            resources).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobPublic | Problem
    """

    return sync_detailed(
        job_id=job_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    job_id: str,
    *,
    client: AuthenticatedClient,
    body: JobFork,
    idempotency_key: None | str | Unset = UNSET,
) -> Response[JobPublic | Problem]:
    """Fork a job from a checkpoint

     Queue a new job that starts from a checkpoint of this one (its weights, optimizer state and data
    position, as a resume would) and runs the rest of the parent's request, with `hyperparameters`
    merged
    over the parent's. The new job's `forked_from` names the parent and the checkpoint. A checkpoint of
    another job is a 422 `invalid_checkpoint`; overrides that fail validation are 422s at their
    `hyperparameters.` path.

    Args:
        job_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobFork): Start a new job from a checkpoint of this one: its weights, optimizer
            state and data position, as
            a resume would. The new job runs the parent's request (model, files, method, seed,
            resources).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[JobPublic | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: str,
    *,
    client: AuthenticatedClient,
    body: JobFork,
    idempotency_key: None | str | Unset = UNSET,
) -> JobPublic | Problem | None:
    """Fork a job from a checkpoint

     Queue a new job that starts from a checkpoint of this one (its weights, optimizer state and data
    position, as a resume would) and runs the rest of the parent's request, with `hyperparameters`
    merged
    over the parent's. The new job's `forked_from` names the parent and the checkpoint. A checkpoint of
    another job is a 422 `invalid_checkpoint`; overrides that fail validation are 422s at their
    `hyperparameters.` path.

    Args:
        job_id (str):
        idempotency_key (None | str | Unset): Any unique string (e.g. a UUID): a retry with the
            same key and body returns the first response instead of acting twice. Kept 24 hours.
        body (JobFork): Start a new job from a checkpoint of this one: its weights, optimizer
            state and data position, as
            a resume would. The new job runs the parent's request (model, files, method, seed,
            resources).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        JobPublic | Problem
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
