"""Live job events over server-sent events, and waiting for a job to finish.

Hand-written: sdk/extra/stream.py is the source, copied into the generated package by `make sdk`.
The generated `stream_job_events` buffers the whole `text/event-stream` response, so following a
job live needs this small helper.

    from keel_client import AuthenticatedClient, stream_events, wait_for_job

    client = AuthenticatedClient(base_url="http://127.0.0.1:8000", token="keel_...")
    for event in stream_events(client, "job-..."):
        print(event.seq, event.type_.value, event.data.to_dict())
    job = wait_for_job(client, "job-...")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from .api.jobs import retrieve_job
from .client import AuthenticatedClient
from .models.job_event_public import JobEventPublic
from .models.job_public import JobPublic
from .models.problem import Problem

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
"""Job statuses after which no more events come."""
DONE_EVENT = "job.done"
"""The last event of every job's stream."""
STREAM_PATH = "/v1/jobs/{job_id}/events/stream"


class StreamError(Exception):
    """The server refused the stream (a 4xx other than 429), or it kept failing past `max_retries`."""

    def __init__(self, message: str, *, status: int | None = None, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem or {}


class JobFailed(Exception):
    """`wait_for_job(..., raise_on_failure=True)`: the job ended `failed` or `cancelled`."""

    def __init__(self, job: JobPublic) -> None:
        error = job.error.message if job.error else ""
        super().__init__(f"job {job.id} {job.status.value}" + (f": {error}" if error else ""))
        self.job = job


def parse_sse(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """The SSE wire format as dicts with `data` and, when sent, `id`, `event`, `retry` (WHATWG rules:
    `:` lines are comments, multi-line data is joined with newlines, a blank line ends an event)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield {**fields, "data": "\n".join(data)}
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name in ("id", "event", "retry"):
            fields[name] = value


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        response.read()
        body = response.json()
    except (ValueError, httpx.HTTPError):
        return {}
    return body if isinstance(body, dict) else {}


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def _until(lines: Iterator[str], deadline: float | None, job_id: str) -> Iterator[str]:
    for line in lines:  # the server sends a keep-alive comment every 15 s: the deadline is seen
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not finish in time")
        yield line


def stream_events(client: AuthenticatedClient, job_id: str, last_event_id: str | int | None = None, *,
                  timeout_s: float | None = None, max_retries: int = 30, backoff_s: float = 0.5,
                  read_timeout_s: float = 60.0) -> Iterator[JobEventPublic]:
    """Yield the job's events in order, from after `last_event_id` (an event `seq`; None: from the first).

    A dropped connection is resumed with the `Last-Event-ID` header, so no event is lost or repeated.
    The iterator ends after `job.done`, or when the server closes the stream of a finished job. A 4xx
    answer raises `StreamError` carrying the problem details; network errors, 429 and 5xx answers are
    retried with exponential backoff (`max_retries` failures in a row at most). `timeout_s` bounds the
    whole stream (`TimeoutError`)."""
    last = None if last_event_id is None else str(last_event_id)
    failures = 0
    timeout = httpx.Timeout(10.0, read=read_timeout_s)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if last is not None:
            headers["Last-Event-ID"] = last
        wait = None
        try:
            with client.get_httpx_client().stream("GET", STREAM_PATH.format(job_id=job_id), headers=headers,
                                                  timeout=timeout) as response:
                if response.status_code >= 400:
                    problem = _problem(response)
                    if response.status_code < 500 and response.status_code != 429:
                        raise StreamError(problem.get("detail") or f"HTTP {response.status_code}",
                                          status=response.status_code, problem=problem)
                    wait = _retry_after(response)
                    raise httpx.HTTPStatusError(f"HTTP {response.status_code}", request=response.request,
                                                response=response)
                for message in parse_sse(_until(response.iter_lines(), deadline, job_id)):
                    event = JobEventPublic.from_dict(json.loads(message["data"]))
                    last, failures = message.get("id") or str(event.seq), 0
                    yield event
                    if event.type_.value == DONE_EVENT:
                        return
            # A clean end without job.done: the job finished without one, or the server went away.
            if _job_status(client, job_id) in TERMINAL_STATUSES:
                return
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            failures += 1
            if failures > max_retries:
                raise StreamError(f"the event stream of {job_id} kept failing: {exc}") from exc
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not finish in time")
        time.sleep(wait if wait is not None else min(backoff_s * 2 ** max(failures - 1, 0), 10.0))


def _job_status(client: AuthenticatedClient, job_id: str) -> str | None:
    try:
        response = retrieve_job.sync_detailed(job_id, client=client)
    except httpx.TransportError:
        return None
    job = response.parsed
    if isinstance(job, Problem) and response.status_code == 404:
        raise StreamError(job.detail, status=404, problem=job.to_dict())
    return job.status.value if isinstance(job, JobPublic) else None


def wait_for_job(client: AuthenticatedClient, job_id: str, *, timeout_s: float | None = None,
                 on_event: Callable[[JobEventPublic], Any] | None = None,
                 raise_on_failure: bool = False) -> JobPublic:
    """Follow the job's events until it finishes and return the final job.

    `on_event` sees every event (e.g. to draw progress); `timeout_s` bounds the wait (`TimeoutError`).
    With `raise_on_failure`, a failed or cancelled job raises `JobFailed`."""
    for event in stream_events(client, job_id, timeout_s=timeout_s):
        if on_event is not None:
            on_event(event)
    response = retrieve_job.sync_detailed(job_id, client=client)
    job = response.parsed
    if not isinstance(job, JobPublic):
        detail = job.detail if isinstance(job, Problem) else f"HTTP {response.status_code}"
        raise StreamError(detail, status=response.status_code)
    if raise_on_failure and job.status.value in ("failed", "cancelled"):
        raise JobFailed(job)
    return job
