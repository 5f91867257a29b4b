from http import HTTPStatus
from io import BytesIO
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.download_checkpoint_content_include_type_0 import DownloadCheckpointContentIncludeType0
from ...models.download_checkpoint_content_role import DownloadCheckpointContentRole
from ...models.problem import Problem
from ...types import UNSET, File, Response, Unset


def _get_kwargs(
    checkpoint_id: str,
    *,
    role: DownloadCheckpointContentRole | Unset = DownloadCheckpointContentRole.ACTOR,
    merged: bool | Unset = False,
    include: DownloadCheckpointContentIncludeType0 | None | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_role: str | Unset = UNSET
    if not isinstance(role, Unset):
        json_role = role.value

    params["role"] = json_role

    params["merged"] = merged

    json_include: None | str | Unset
    if isinstance(include, Unset):
        json_include = UNSET
    elif isinstance(include, DownloadCheckpointContentIncludeType0):
        json_include = include.value
    else:
        json_include = include
    params["include"] = json_include

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/checkpoints/{checkpoint_id}/content".format(
            checkpoint_id=quote(str(checkpoint_id), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> File | Problem | None:
    if response.status_code == 200:
        response_200 = File(payload=BytesIO(response.content))

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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[File | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
    role: DownloadCheckpointContentRole | Unset = DownloadCheckpointContentRole.ACTOR,
    merged: bool | Unset = False,
    include: DownloadCheckpointContentIncludeType0 | None | Unset = UNSET,
) -> Response[File | Problem]:
    """Download checkpoint content

     The checkpoint's model as a Hugging Face directory in a tar archive, streamed: `config.json`,
    safetensors weights and tokenizer files, loadable with `AutoModelForCausalLM` (policy),
    `AutoModelForSequenceClassification` (reward model) or `AutoModelForTokenClassification`
    (`role=critic`); a LoRA job's checkpoint gives its adapter (`merged=true`: the merged weights).

    Args:
        checkpoint_id (str):
        role (DownloadCheckpointContentRole | Unset): Whose model: `actor` (the policy; the model
            of a supervised job) or `critic` (PPO's value model). Default:
            DownloadCheckpointContentRole.ACTOR.
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.
        include (DownloadCheckpointContentIncludeType0 | None | Unset): `training_state`: add the
            checkpoint's training state (weights, optimizer, scheduler, RNG, loop state) under
            `training_state/`, to resume elsewhere.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        checkpoint_id=checkpoint_id,
        role=role,
        merged=merged,
        include=include,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
    role: DownloadCheckpointContentRole | Unset = DownloadCheckpointContentRole.ACTOR,
    merged: bool | Unset = False,
    include: DownloadCheckpointContentIncludeType0 | None | Unset = UNSET,
) -> File | Problem | None:
    """Download checkpoint content

     The checkpoint's model as a Hugging Face directory in a tar archive, streamed: `config.json`,
    safetensors weights and tokenizer files, loadable with `AutoModelForCausalLM` (policy),
    `AutoModelForSequenceClassification` (reward model) or `AutoModelForTokenClassification`
    (`role=critic`); a LoRA job's checkpoint gives its adapter (`merged=true`: the merged weights).

    Args:
        checkpoint_id (str):
        role (DownloadCheckpointContentRole | Unset): Whose model: `actor` (the policy; the model
            of a supervised job) or `critic` (PPO's value model). Default:
            DownloadCheckpointContentRole.ACTOR.
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.
        include (DownloadCheckpointContentIncludeType0 | None | Unset): `training_state`: add the
            checkpoint's training state (weights, optimizer, scheduler, RNG, loop state) under
            `training_state/`, to resume elsewhere.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return sync_detailed(
        checkpoint_id=checkpoint_id,
        client=client,
        role=role,
        merged=merged,
        include=include,
    ).parsed


async def asyncio_detailed(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
    role: DownloadCheckpointContentRole | Unset = DownloadCheckpointContentRole.ACTOR,
    merged: bool | Unset = False,
    include: DownloadCheckpointContentIncludeType0 | None | Unset = UNSET,
) -> Response[File | Problem]:
    """Download checkpoint content

     The checkpoint's model as a Hugging Face directory in a tar archive, streamed: `config.json`,
    safetensors weights and tokenizer files, loadable with `AutoModelForCausalLM` (policy),
    `AutoModelForSequenceClassification` (reward model) or `AutoModelForTokenClassification`
    (`role=critic`); a LoRA job's checkpoint gives its adapter (`merged=true`: the merged weights).

    Args:
        checkpoint_id (str):
        role (DownloadCheckpointContentRole | Unset): Whose model: `actor` (the policy; the model
            of a supervised job) or `critic` (PPO's value model). Default:
            DownloadCheckpointContentRole.ACTOR.
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.
        include (DownloadCheckpointContentIncludeType0 | None | Unset): `training_state`: add the
            checkpoint's training state (weights, optimizer, scheduler, RNG, loop state) under
            `training_state/`, to resume elsewhere.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        checkpoint_id=checkpoint_id,
        role=role,
        merged=merged,
        include=include,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    checkpoint_id: str,
    *,
    client: AuthenticatedClient,
    role: DownloadCheckpointContentRole | Unset = DownloadCheckpointContentRole.ACTOR,
    merged: bool | Unset = False,
    include: DownloadCheckpointContentIncludeType0 | None | Unset = UNSET,
) -> File | Problem | None:
    """Download checkpoint content

     The checkpoint's model as a Hugging Face directory in a tar archive, streamed: `config.json`,
    safetensors weights and tokenizer files, loadable with `AutoModelForCausalLM` (policy),
    `AutoModelForSequenceClassification` (reward model) or `AutoModelForTokenClassification`
    (`role=critic`); a LoRA job's checkpoint gives its adapter (`merged=true`: the merged weights).

    Args:
        checkpoint_id (str):
        role (DownloadCheckpointContentRole | Unset): Whose model: `actor` (the policy; the model
            of a supervised job) or `critic` (PPO's value model). Default:
            DownloadCheckpointContentRole.ACTOR.
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.
        include (DownloadCheckpointContentIncludeType0 | None | Unset): `training_state`: add the
            checkpoint's training state (weights, optimizer, scheduler, RNG, loop state) under
            `training_state/`, to resume elsewhere.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return (
        await asyncio_detailed(
            checkpoint_id=checkpoint_id,
            client=client,
            role=role,
            merged=merged,
            include=include,
        )
    ).parsed
