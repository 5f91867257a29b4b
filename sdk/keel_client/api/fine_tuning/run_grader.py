from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.grader_run import GraderRun
from ...models.problem import Problem
from ...models.run_grader_response_run_grader import RunGraderResponseRunGrader
from ...types import Response


def _get_kwargs(
    *,
    body: GraderRun,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/fine_tuning/alpha/graders/run",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Problem | RunGraderResponseRunGrader | None:
    if response.status_code == 200:
        response_200 = RunGraderResponseRunGrader.from_dict(response.json())

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
) -> Response[Problem | RunGraderResponseRunGrader]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: GraderRun,
) -> Response[Problem | RunGraderResponseRunGrader]:
    """Run a grader

     OpenAI's `fine_tuning.alpha.graders.run`: the grader's reward of `model_sample` for `item`. A sample
    the grader cannot score has reward 0 and the reason in `metadata.errors`.

    Args:
        body (GraderRun):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | RunGraderResponseRunGrader]
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
    body: GraderRun,
) -> Problem | RunGraderResponseRunGrader | None:
    """Run a grader

     OpenAI's `fine_tuning.alpha.graders.run`: the grader's reward of `model_sample` for `item`. A sample
    the grader cannot score has reward 0 and the reason in `metadata.errors`.

    Args:
        body (GraderRun):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | RunGraderResponseRunGrader
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: GraderRun,
) -> Response[Problem | RunGraderResponseRunGrader]:
    """Run a grader

     OpenAI's `fine_tuning.alpha.graders.run`: the grader's reward of `model_sample` for `item`. A sample
    the grader cannot score has reward 0 and the reason in `metadata.errors`.

    Args:
        body (GraderRun):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | RunGraderResponseRunGrader]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: GraderRun,
) -> Problem | RunGraderResponseRunGrader | None:
    """Run a grader

     OpenAI's `fine_tuning.alpha.graders.run`: the grader's reward of `model_sample` for `item`. A sample
    the grader cannot score has reward 0 and the reason in `metadata.errors`.

    Args:
        body (GraderRun):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | RunGraderResponseRunGrader
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
