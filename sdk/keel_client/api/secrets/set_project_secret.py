from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...models.secret_public import SecretPublic
from ...models.secret_write import SecretWrite
from ...types import Response


def _get_kwargs(
    name: str,
    *,
    body: SecretWrite,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "put",
        "url": "/v1/projects/current/secrets/{name}".format(
            name=quote(str(name), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Problem | SecretPublic | None:
    if response.status_code == 200:
        response_200 = SecretPublic.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())

        return response_403

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
) -> Response[Problem | SecretPublic]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    name: str,
    *,
    client: AuthenticatedClient,
    body: SecretWrite,
) -> Response[Problem | SecretPublic]:
    """Set a project secret

     Create or replace a secret of the caller's project. The answer never holds the value. A URL a
    worker will connect to (`WANDB_BASE_URL`) must be http(s) on a public address.

    Args:
        name (str): Upper-case letters, digits and `_`, e.g. `WANDB_API_KEY`.
        body (SecretWrite):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | SecretPublic]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    name: str,
    *,
    client: AuthenticatedClient,
    body: SecretWrite,
) -> Problem | SecretPublic | None:
    """Set a project secret

     Create or replace a secret of the caller's project. The answer never holds the value. A URL a
    worker will connect to (`WANDB_BASE_URL`) must be http(s) on a public address.

    Args:
        name (str): Upper-case letters, digits and `_`, e.g. `WANDB_API_KEY`.
        body (SecretWrite):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | SecretPublic
    """

    return sync_detailed(
        name=name,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    name: str,
    *,
    client: AuthenticatedClient,
    body: SecretWrite,
) -> Response[Problem | SecretPublic]:
    """Set a project secret

     Create or replace a secret of the caller's project. The answer never holds the value. A URL a
    worker will connect to (`WANDB_BASE_URL`) must be http(s) on a public address.

    Args:
        name (str): Upper-case letters, digits and `_`, e.g. `WANDB_API_KEY`.
        body (SecretWrite):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | SecretPublic]
    """

    kwargs = _get_kwargs(
        name=name,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    name: str,
    *,
    client: AuthenticatedClient,
    body: SecretWrite,
) -> Problem | SecretPublic | None:
    """Set a project secret

     Create or replace a secret of the caller's project. The answer never holds the value. A URL a
    worker will connect to (`WANDB_BASE_URL`) must be http(s) on a public address.

    Args:
        name (str): Upper-case letters, digits and `_`, e.g. `WANDB_API_KEY`.
        body (SecretWrite):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | SecretPublic
    """

    return (
        await asyncio_detailed(
            name=name,
            client=client,
            body=body,
        )
    ).parsed
