from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.fine_tuning_checkpoints import FineTuningCheckpoints
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: str,
    *,
    after: None | str | Unset = UNSET,
    limit: int | Unset = 10,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_after: None | str | Unset
    if isinstance(after, Unset):
        json_after = UNSET
    else:
        json_after = after
    params["after"] = json_after

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/fine_tuning/jobs/{job_id}/checkpoints".format(
            job_id=quote(str(job_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> FineTuningCheckpoints | Problem | None:
    if response.status_code == 200:
        response_200 = FineTuningCheckpoints.from_dict(response.json())

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
) -> Response[FineTuningCheckpoints | Problem]:
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
    after: None | str | Unset = UNSET,
    limit: int | Unset = 10,
) -> Response[FineTuningCheckpoints | Problem]:
    """List fine-tuning checkpoints

     The job's checkpoints, newest first. `fine_tuned_model_checkpoint` is the Keel checkpoint id
    (`from_checkpoint` of a Keel job).

    Args:
        job_id (str):
        after (None | str | Unset):
        limit (int | Unset):  Default: 10.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[FineTuningCheckpoints | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        after=after,
        limit=limit,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: str,
    *,
    client: AuthenticatedClient,
    after: None | str | Unset = UNSET,
    limit: int | Unset = 10,
) -> FineTuningCheckpoints | Problem | None:
    """List fine-tuning checkpoints

     The job's checkpoints, newest first. `fine_tuned_model_checkpoint` is the Keel checkpoint id
    (`from_checkpoint` of a Keel job).

    Args:
        job_id (str):
        after (None | str | Unset):
        limit (int | Unset):  Default: 10.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        FineTuningCheckpoints | Problem
    """

    return sync_detailed(
        job_id=job_id,
        client=client,
        after=after,
        limit=limit,
    ).parsed


async def asyncio_detailed(
    job_id: str,
    *,
    client: AuthenticatedClient,
    after: None | str | Unset = UNSET,
    limit: int | Unset = 10,
) -> Response[FineTuningCheckpoints | Problem]:
    """List fine-tuning checkpoints

     The job's checkpoints, newest first. `fine_tuned_model_checkpoint` is the Keel checkpoint id
    (`from_checkpoint` of a Keel job).

    Args:
        job_id (str):
        after (None | str | Unset):
        limit (int | Unset):  Default: 10.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[FineTuningCheckpoints | Problem]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        after=after,
        limit=limit,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: str,
    *,
    client: AuthenticatedClient,
    after: None | str | Unset = UNSET,
    limit: int | Unset = 10,
) -> FineTuningCheckpoints | Problem | None:
    """List fine-tuning checkpoints

     The job's checkpoints, newest first. `fine_tuned_model_checkpoint` is the Keel checkpoint id
    (`from_checkpoint` of a Keel job).

    Args:
        job_id (str):
        after (None | str | Unset):
        limit (int | Unset):  Default: 10.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        FineTuningCheckpoints | Problem
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            client=client,
            after=after,
            limit=limit,
        )
    ).parsed
