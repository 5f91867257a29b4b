from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.list_models_kind_type_0 import ListModelsKindType0
from ...models.models_public import ModelsPublic
from ...models.problem import Problem
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    kind: ListModelsKindType0 | None | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["limit"] = limit

    json_after: None | str | Unset
    if isinstance(after, Unset):
        json_after = UNSET
    else:
        json_after = after
    params["after"] = json_after

    json_kind: None | str | Unset
    if isinstance(kind, Unset):
        json_kind = UNSET
    elif isinstance(kind, ListModelsKindType0):
        json_kind = kind.value
    else:
        json_kind = kind
    params["kind"] = json_kind

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/models",
        "params": params,
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ModelsPublic | Problem | None:
    if response.status_code == 200:
        response_200 = ModelsPublic.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

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
) -> Response[ModelsPublic | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    kind: ListModelsKindType0 | None | Unset = UNSET,
) -> Response[ModelsPublic | Problem]:
    """List models

     The project's models, newest first. A model a fine-tuning job trained is followed by its entry under
    its OpenAI name (`alias_of` set); `limit` counts models, and the cursor is always a Keel model id.
    The first page (no `after`) ends with the deployment's shared base models (`owned_by: "keel"`, the
    id is the directory under a model root), unless `kind` asks for scoring models; each can be a job's
    `model` or a completion's.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        kind (ListModelsKindType0 | None | Unset): Only models of this kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ModelsPublic | Problem]
    """

    kwargs = _get_kwargs(
        limit=limit,
        after=after,
        kind=kind,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    kind: ListModelsKindType0 | None | Unset = UNSET,
) -> ModelsPublic | Problem | None:
    """List models

     The project's models, newest first. A model a fine-tuning job trained is followed by its entry under
    its OpenAI name (`alias_of` set); `limit` counts models, and the cursor is always a Keel model id.
    The first page (no `after`) ends with the deployment's shared base models (`owned_by: "keel"`, the
    id is the directory under a model root), unless `kind` asks for scoring models; each can be a job's
    `model` or a completion's.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        kind (ListModelsKindType0 | None | Unset): Only models of this kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ModelsPublic | Problem
    """

    return sync_detailed(
        client=client,
        limit=limit,
        after=after,
        kind=kind,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    kind: ListModelsKindType0 | None | Unset = UNSET,
) -> Response[ModelsPublic | Problem]:
    """List models

     The project's models, newest first. A model a fine-tuning job trained is followed by its entry under
    its OpenAI name (`alias_of` set); `limit` counts models, and the cursor is always a Keel model id.
    The first page (no `after`) ends with the deployment's shared base models (`owned_by: "keel"`, the
    id is the directory under a model root), unless `kind` asks for scoring models; each can be a job's
    `model` or a completion's.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        kind (ListModelsKindType0 | None | Unset): Only models of this kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ModelsPublic | Problem]
    """

    kwargs = _get_kwargs(
        limit=limit,
        after=after,
        kind=kind,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    limit: int | Unset = 20,
    after: None | str | Unset = UNSET,
    kind: ListModelsKindType0 | None | Unset = UNSET,
) -> ModelsPublic | Problem | None:
    """List models

     The project's models, newest first. A model a fine-tuning job trained is followed by its entry under
    its OpenAI name (`alias_of` set); `limit` counts models, and the cursor is always a Keel model id.
    The first page (no `after`) ends with the deployment's shared base models (`owned_by: "keel"`, the
    id is the directory under a model root), unless `kind` asks for scoring models; each can be a job's
    `model` or a completion's.

    Args:
        limit (int | Unset): Page size (1-100). Default: 20.
        after (None | str | Unset): Return items after (older than) this id.
        kind (ListModelsKindType0 | None | Unset): Only models of this kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ModelsPublic | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            limit=limit,
            after=after,
            kind=kind,
        )
    ).parsed
