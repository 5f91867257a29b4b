from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.grader_validate import GraderValidate
from ...models.problem import Problem
from ...models.validate_grader_response_validate_grader import ValidateGraderResponseValidateGrader
from ...types import Response


def _get_kwargs(
    *,
    body: GraderValidate,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/fine_tuning/alpha/graders/validate",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | ValidateGraderResponseValidateGrader | None:
    if response.status_code == 200:
        response_200 = ValidateGraderResponseValidateGrader.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())

        return response_401

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Problem | ValidateGraderResponseValidateGrader]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: GraderValidate,
) -> Response[Problem | ValidateGraderResponseValidateGrader]:
    """Validate a grader

     OpenAI's `fine_tuning.alpha.graders.validate`: the grader back when it is valid (its score_model
    graders naming models of this project), else a 400 naming the field.

    Args:
        body (GraderValidate):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ValidateGraderResponseValidateGrader]
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
    body: GraderValidate,
) -> Problem | ValidateGraderResponseValidateGrader | None:
    """Validate a grader

     OpenAI's `fine_tuning.alpha.graders.validate`: the grader back when it is valid (its score_model
    graders naming models of this project), else a 400 naming the field.

    Args:
        body (GraderValidate):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ValidateGraderResponseValidateGrader
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: GraderValidate,
) -> Response[Problem | ValidateGraderResponseValidateGrader]:
    """Validate a grader

     OpenAI's `fine_tuning.alpha.graders.validate`: the grader back when it is valid (its score_model
    graders naming models of this project), else a 400 naming the field.

    Args:
        body (GraderValidate):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | ValidateGraderResponseValidateGrader]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: GraderValidate,
) -> Problem | ValidateGraderResponseValidateGrader | None:
    """Validate a grader

     OpenAI's `fine_tuning.alpha.graders.validate`: the grader back when it is valid (its score_model
    graders naming models of this project), else a 400 naming the field.

    Args:
        body (GraderValidate):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | ValidateGraderResponseValidateGrader
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
