from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.create_chat_completion_raw import CreateChatCompletionRaw
from ...models.problem import Problem
from ...types import Response


def _get_kwargs(
    *,
    body: CreateChatCompletionRaw,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/chat/completions",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Any | Problem | None:
    if response.status_code == 200:
        response_200 = response.json()
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

    if response.status_code == 503:
        response_503 = Problem.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Any | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: CreateChatCompletionRaw,
) -> Response[Any | Problem]:
    """Create a chat completion

     OpenAI's `chat.completions.create` on any model the project can use (`GET /v1/models`): a base
    model under the deployment's model roots, a Keel model id, an `ft:` name, a checkpoint id or a
    `tinker://` sampler path. `extra_body` may add `return_token_ids` and `trajectory_id`
    (docs/inference.md). `stream: true` answers server-sent events ending with `data: [DONE]`.

    Args:
        body (CreateChatCompletionRaw):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Any | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: CreateChatCompletionRaw,
) -> Any | Problem | None:
    """Create a chat completion

     OpenAI's `chat.completions.create` on any model the project can use (`GET /v1/models`): a base
    model under the deployment's model roots, a Keel model id, an `ft:` name, a checkpoint id or a
    `tinker://` sampler path. `extra_body` may add `return_token_ids` and `trajectory_id`
    (docs/inference.md). `stream: true` answers server-sent events ending with `data: [DONE]`.

    Args:
        body (CreateChatCompletionRaw):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Any | Problem
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: CreateChatCompletionRaw,
) -> Response[Any | Problem]:
    """Create a chat completion

     OpenAI's `chat.completions.create` on any model the project can use (`GET /v1/models`): a base
    model under the deployment's model roots, a Keel model id, an `ft:` name, a checkpoint id or a
    `tinker://` sampler path. `extra_body` may add `return_token_ids` and `trajectory_id`
    (docs/inference.md). `stream: true` answers server-sent events ending with `data: [DONE]`.

    Args:
        body (CreateChatCompletionRaw):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Any | Problem]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: CreateChatCompletionRaw,
) -> Any | Problem | None:
    """Create a chat completion

     OpenAI's `chat.completions.create` on any model the project can use (`GET /v1/models`): a base
    model under the deployment's model roots, a Keel model id, an `ft:` name, a checkpoint id or a
    `tinker://` sampler path. `extra_body` may add `return_token_ids` and `trajectory_id`
    (docs/inference.md). `stream: true` answers server-sent events ending with `data: [DONE]`.

    Args:
        body (CreateChatCompletionRaw):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Any | Problem
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
