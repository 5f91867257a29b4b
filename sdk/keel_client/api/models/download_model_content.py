from http import HTTPStatus
from io import BytesIO
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.problem import Problem
from ...types import UNSET, File, Response, Unset


def _get_kwargs(
    model_id: str,
    *,
    merged: bool | Unset = False,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["merged"] = merged

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/models/{model_id}/content".format(
            model_id=quote(str(model_id), safe=""),
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
    model_id: str,
    *,
    client: AuthenticatedClient,
    merged: bool | Unset = False,
) -> Response[File | Problem]:
    """Download a model

     The model as a Hugging Face directory in a tar archive, streamed: `config.json`, safetensors
    weights, tokenizer files and `generation_config.json` when there is one; load it with
    `AutoModelForCausalLM` (policy), `AutoModelForSequenceClassification` (reward model) or
    `AutoModelForTokenClassification` (value model). A `lora` model gives its adapter (load it with
    `peft.PeftModel.from_pretrained(base, dir)`); `merged=true` gives the merged full weights.

    Args:
        model_id (str): A Keel model id, or a fine-tuned model's OpenAI name (`ft:...`).
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        model_id=model_id,
        merged=merged,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    model_id: str,
    *,
    client: AuthenticatedClient,
    merged: bool | Unset = False,
) -> File | Problem | None:
    """Download a model

     The model as a Hugging Face directory in a tar archive, streamed: `config.json`, safetensors
    weights, tokenizer files and `generation_config.json` when there is one; load it with
    `AutoModelForCausalLM` (policy), `AutoModelForSequenceClassification` (reward model) or
    `AutoModelForTokenClassification` (value model). A `lora` model gives its adapter (load it with
    `peft.PeftModel.from_pretrained(base, dir)`); `merged=true` gives the merged full weights.

    Args:
        model_id (str): A Keel model id, or a fine-tuned model's OpenAI name (`ft:...`).
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return sync_detailed(
        model_id=model_id,
        client=client,
        merged=merged,
    ).parsed


async def asyncio_detailed(
    model_id: str,
    *,
    client: AuthenticatedClient,
    merged: bool | Unset = False,
) -> Response[File | Problem]:
    """Download a model

     The model as a Hugging Face directory in a tar archive, streamed: `config.json`, safetensors
    weights, tokenizer files and `generation_config.json` when there is one; load it with
    `AutoModelForCausalLM` (policy), `AutoModelForSequenceClassification` (reward model) or
    `AutoModelForTokenClassification` (value model). A `lora` model gives its adapter (load it with
    `peft.PeftModel.from_pretrained(base, dir)`); `merged=true` gives the merged full weights.

    Args:
        model_id (str): A Keel model id, or a fine-tuned model's OpenAI name (`ft:...`).
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[File | Problem]
    """

    kwargs = _get_kwargs(
        model_id=model_id,
        merged=merged,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    model_id: str,
    *,
    client: AuthenticatedClient,
    merged: bool | Unset = False,
) -> File | Problem | None:
    """Download a model

     The model as a Hugging Face directory in a tar archive, streamed: `config.json`, safetensors
    weights, tokenizer files and `generation_config.json` when there is one; load it with
    `AutoModelForCausalLM` (policy), `AutoModelForSequenceClassification` (reward model) or
    `AutoModelForTokenClassification` (value model). A `lora` model gives its adapter (load it with
    `peft.PeftModel.from_pretrained(base, dir)`); `merged=true` gives the merged full weights.

    Args:
        model_id (str): A Keel model id, or a fine-tuned model's OpenAI name (`ft:...`).
        merged (bool | Unset): LoRA: the merged full weights instead of the adapter (full models:
            ignored). Default: False.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        File | Problem
    """

    return (
        await asyncio_detailed(
            model_id=model_id,
            client=client,
            merged=merged,
        )
    ).parsed
