"""Interactive trainers from Python, shaped like Tinker's client (docs/trainers.md): a loop written for
Tinker ports by changing the import and the base URL.

Hand-written: sdk/extra/training.py is the source, copied into the generated package by `make sdk`.

    from keel_client import training
    from keel_client.training import types

    service = training.ServiceClient(base_url="http://127.0.0.1:8000", api_key="keel_...")
    trainer = service.create_lora_training_client(base_model="/models/qwen", rank=16)
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                        loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights})
    fwd = trainer.forward_backward([datum], "cross_entropy")      # returns at once: a future
    opt = trainer.optim_step(types.AdamParams(learning_rate=1e-4))
    print(fwd.result().metrics["loss:sum"], opt.result().step)

Every call is sent at once (a bad one raises `KeelError` there, with the `param` at fault) and answers
with a future; `.result()` waits for the operation (long-polling it), `await future` (or
`await future.result_async()`) does the same in asyncio, and the `*_async` methods send without
blocking the event loop. A trainer runs its calls in the order they were sent. Sending is retried
on connection errors, 429s and 5xx with the same `Idempotency-Key`, so a call is never made twice.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import types as _types
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import httpx

from . import training_types as _t
from .training_types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LoadWeightsResponse,
    ModelInput,
    OptimStepResponse,
    SampleResponse,
    SamplingParams,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
    TensorData,
)

types = _types.SimpleNamespace(**{name: getattr(_t, name) for name in (
    "AdamParams", "Datum", "ForwardBackwardOutput", "LoadWeightsResponse", "ModelInput", "OptimStepResponse",
    "SampleResponse", "SampledSequence", "SamplingParams", "SaveWeightsForSamplerResponse", "SaveWeightsResponse",
    "TensorData")})
"""`from keel_client.training import types`: Tinker's `types` names."""

T = TypeVar("T")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
POLL_WAIT_S = 10.0
"""Seconds each long-poll of an operation waits server-side."""


class KeelError(Exception):
    """The server refused a call (a 4xx: `code`, `param`), or an operation failed (`OperationFailed`)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


class OperationFailed(KeelError):
    """`.result()` of an operation that ended `failed` (its `error`: `code`, `message`, `param`)."""

    def __init__(self, operation: dict[str, Any]) -> None:
        error = operation.get("error") or {}
        super().__init__(f"{operation.get('kind')} {operation.get('id')} failed: {error.get('code')}: "
                         f"{error.get('message')}", code=error.get("code"), param=error.get("param"))
        self.operation = operation


def _problem(response: httpx.Response) -> KeelError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") or response.text[:500] or response.reason_phrase
    return KeelError(f"{response.status_code} {body.get('code', '')}: {detail}", status=response.status_code,
                     code=body.get("code"), param=body.get("param"))


class _Http:
    """One base URL and key; a sync client now and an async one on first use, with retries."""

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        self.base_url, self.max_retries = base_url.rstrip("/"), max_retries
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.timeout = httpx.Timeout(timeout + POLL_WAIT_S)
        self.sync = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout)
        self._async: httpx.AsyncClient | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        after = response.headers.get("Retry-After") if response is not None else None
        if after and after.isdigit():
            return float(after)
        return min(8.0, 0.25 * 2**attempt) * (0.5 + random.random())

    def request(self, method: str, path: str, *, json: Any = None, params: Any = None,
                idempotent_key: bool = False) -> dict[str, Any]:
        headers = {"Idempotency-Key": uuid.uuid4().hex} if idempotent_key else {}
        for attempt in range(self.max_retries + 1):
            try:
                response = self.sync.request(method, path, json=json, params=params, headers=headers)
            except httpx.TransportError:
                if attempt == self.max_retries:
                    raise
                time.sleep(self._delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                time.sleep(self._delay(attempt, response))
                continue
            if response.status_code >= 400:
                raise _problem(response)
            return response.json()
        raise AssertionError("unreachable")

    async def arequest(self, method: str, path: str, *, json: Any = None, params: Any = None,
                       idempotent_key: bool = False) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async_loop is not loop:  # one client per event loop (asyncio.run makes new ones)
            self._async = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=self.timeout)
            self._async_loop = loop
        headers = {"Idempotency-Key": uuid.uuid4().hex} if idempotent_key else {}
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._async.request(method, path, json=json, params=params, headers=headers)
            except httpx.TransportError:
                if attempt == self.max_retries:
                    raise
                await asyncio.sleep(self._delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, response))
                continue
            if response.status_code >= 400:
                raise _problem(response)
            return response.json()
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the sync client; an async one goes with its event loop (or `aclose` it inside the loop)."""
        self.sync.close()
        self._async = self._async_loop = None

    async def aclose(self) -> None:
        if self._async is not None and self._async_loop is asyncio.get_running_loop():
            await self._async.aclose()
        self.close()


class APIFuture(Generic[T]):
    """A queued operation. `result()` waits for it and returns the parsed result (or raises
    `OperationFailed`); `await future` does the same without blocking the event loop."""

    def __init__(self, http: _Http, operation: dict[str, Any], parse: Callable[[dict[str, Any], int], T]) -> None:
        self._http, self.operation, self._parse = http, operation, parse

    @property
    def id(self) -> str:
        return self.operation["id"]

    @property
    def _path(self) -> str:
        return f"/v1/trainers/{self.operation['trainer_id']}/operations/{self.id}"

    def done(self) -> bool:
        return self.operation["status"] in ("succeeded", "failed")

    def _value(self) -> T:
        if self.operation["status"] == "failed":
            raise OperationFailed(self.operation)
        return self._parse(self.operation.get("result") or {}, int(self.operation.get("tokens") or 0))

    def result(self, timeout: float | None = None) -> T:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            wait = POLL_WAIT_S if deadline is None else max(0.0, min(POLL_WAIT_S, deadline - time.monotonic()))
            self.operation = self._http.request("GET", self._path, params={"wait": wait})
            if deadline is not None and time.monotonic() >= deadline and not self.done():
                raise TimeoutError(f"operation {self.id} is still {self.operation['status']}")
        return self._value()

    async def result_async(self, timeout: float | None = None) -> T:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.done():
            wait = POLL_WAIT_S if deadline is None else max(0.0, min(POLL_WAIT_S, deadline - loop.time()))
            self.operation = await self._http.arequest("GET", self._path, params={"wait": wait})
            if deadline is not None and loop.time() >= deadline and not self.done():
                raise TimeoutError(f"operation {self.id} is still {self.operation['status']}")
        return self._value()

    def __await__(self):
        return self.result_async().__await__()


def _data(data: Iterable[Datum | dict[str, Any]]) -> list[dict[str, Any]]:
    return [d.to_json() if isinstance(d, Datum) else Datum(d["model_input"], d.get("loss_fn_inputs") or {}).to_json()
            for d in data]


def _prompt(prompt: Any) -> list[int] | str:
    return prompt if isinstance(prompt, str) else [int(t) for t in _t.as_list(prompt)]


class TrainingClient:
    """One trainer (`/v1/trainers/{id}`). Every method sends the call and returns an `APIFuture`; the
    `*_async` variants do the same from asyncio."""

    def __init__(self, http: _Http, trainer: dict[str, Any]) -> None:
        self._http, self.trainer = http, trainer
        self.trainer_id: str = trainer["id"]

    def _send(self, kind: str, body: dict[str, Any], parse: Callable[[dict[str, Any], int], T]) -> APIFuture[T]:
        op = self._http.request("POST", f"/v1/trainers/{self.trainer_id}/{kind}", json=body, idempotent_key=True)
        return APIFuture(self._http, op, parse)

    async def _send_async(self, kind: str, body: dict[str, Any], parse) -> APIFuture:
        op = await self._http.arequest("POST", f"/v1/trainers/{self.trainer_id}/{kind}", json=body,
                                       idempotent_key=True)
        return APIFuture(self._http, op, parse)

    @staticmethod
    def _forward_body(data, loss_fn: str, loss_fn_config: dict[str, float] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"data": _data(data), "loss_fn": loss_fn}
        if loss_fn_config:
            body["loss_fn_config"] = {k: float(v) for k, v in loss_fn_config.items()}
        return body

    @staticmethod
    def _sample_body(prompts, sampling_params, num_samples, sampler_path) -> dict[str, Any]:
        params = sampling_params or SamplingParams()
        return {"prompts": [_prompt(p) for p in prompts], "sampling_params": params.to_json(),
                "num_samples": int(num_samples), "sampler_path": sampler_path}

    # -- the primitives ---------------------------------------------------------------------------

    def forward_backward(self, data: Iterable[Datum], loss_fn: str = "cross_entropy",
                         loss_fn_config: dict[str, float] | None = None) -> APIFuture[ForwardBackwardOutput]:
        return self._send("forward_backward", self._forward_body(data, loss_fn, loss_fn_config),
                          ForwardBackwardOutput.from_json)

    def forward(self, data: Iterable[Datum], loss_fn: str = "cross_entropy",
                loss_fn_config: dict[str, float] | None = None) -> APIFuture[ForwardBackwardOutput]:
        return self._send("forward", self._forward_body(data, loss_fn, loss_fn_config), ForwardBackwardOutput.from_json)

    def optim_step(self, adam_params: AdamParams | None = None) -> APIFuture[OptimStepResponse]:
        return self._send("optim_step", {"adam_params": (adam_params or AdamParams()).to_json()},
                          OptimStepResponse.from_json)

    def sample(self, prompts: Iterable[ModelInput | list[int] | str], sampling_params: SamplingParams | None = None,
               num_samples: int = 1, sampler_path: str | None = None) -> APIFuture[SampleResponse]:
        return self._send("sample", self._sample_body(prompts, sampling_params, num_samples, sampler_path),
                          SampleResponse.from_json)

    def save_state(self, name: str) -> APIFuture[SaveWeightsResponse]:
        return self._send("save_state", {"name": name}, SaveWeightsResponse.from_json)

    def load_state(self, path: str, optimizer: bool = True) -> APIFuture[LoadWeightsResponse]:
        """Load a `save_state` (its `path`, a model id): weights, and with `optimizer` the Adam state and step."""
        return self._send("load_state", {"path": path, "optimizer": optimizer}, LoadWeightsResponse.from_json)

    def load_state_with_optimizer(self, path: str) -> APIFuture[LoadWeightsResponse]:
        return self.load_state(path, optimizer=True)

    def save_weights_for_sampler(self, name: str) -> APIFuture[SaveWeightsForSamplerResponse]:
        return self._send("save_weights_for_sampler", {"name": name}, SaveWeightsForSamplerResponse.from_json)

    def save_weights_and_get_sampling_client(self, name: str) -> SamplingClient:
        return SamplingClient(self, self.save_weights_for_sampler(name).result().path)

    def create_sampling_client(self, model_path: str | None = None) -> SamplingClient:
        """Sample from a snapshot this trainer saved (`model_path`), or from its current weights (None)."""
        return SamplingClient(self, model_path)

    # -- async -------------------------------------------------------------------------------------

    async def forward_backward_async(self, data, loss_fn: str = "cross_entropy", loss_fn_config=None) -> APIFuture:
        return await self._send_async("forward_backward", self._forward_body(data, loss_fn, loss_fn_config),
                                      ForwardBackwardOutput.from_json)

    async def forward_async(self, data, loss_fn: str = "cross_entropy", loss_fn_config=None) -> APIFuture:
        return await self._send_async("forward", self._forward_body(data, loss_fn, loss_fn_config),
                                      ForwardBackwardOutput.from_json)

    async def optim_step_async(self, adam_params: AdamParams | None = None) -> APIFuture:
        return await self._send_async("optim_step", {"adam_params": (adam_params or AdamParams()).to_json()},
                                      OptimStepResponse.from_json)

    async def sample_async(self, prompts, sampling_params=None, num_samples: int = 1, sampler_path=None) -> APIFuture:
        return await self._send_async("sample", self._sample_body(prompts, sampling_params, num_samples, sampler_path),
                                      SampleResponse.from_json)

    async def save_state_async(self, name: str) -> APIFuture:
        return await self._send_async("save_state", {"name": name}, SaveWeightsResponse.from_json)

    async def load_state_async(self, path: str, optimizer: bool = True) -> APIFuture:
        return await self._send_async("load_state", {"path": path, "optimizer": optimizer},
                                      LoadWeightsResponse.from_json)

    async def save_weights_for_sampler_async(self, name: str) -> APIFuture:
        return await self._send_async("save_weights_for_sampler", {"name": name},
                                      SaveWeightsForSamplerResponse.from_json)

    async def save_weights_and_get_sampling_client_async(self, name: str) -> SamplingClient:
        future = await self.save_weights_for_sampler_async(name)
        return SamplingClient(self, (await future).path)

    # -- the trainer -------------------------------------------------------------------------------

    def get_info(self) -> dict[str, Any]:
        """The trainer as the API shows it now (`status`, `step`, `tokens`, ...)."""
        self.trainer = self._http.request("GET", f"/v1/trainers/{self.trainer_id}")
        return self.trainer

    def events(self, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        return self._http.request("GET", f"/v1/trainers/{self.trainer_id}/events",
                                  params={"after": after, "limit": limit})["data"]

    def delete(self) -> dict[str, Any]:
        """End the trainer (its actor is released; the models it saved stay)."""
        self.trainer = self._http.request("DELETE", f"/v1/trainers/{self.trainer_id}")
        return self.trainer


class SamplingClient:
    """Tinker's sampling client over a trainer: one prompt per call, from a snapshot or the live weights."""

    def __init__(self, training_client: TrainingClient, model_path: str | None) -> None:
        self.training_client, self.model_path = training_client, model_path

    def sample(self, prompt: ModelInput | list[int] | str, num_samples: int = 1,
               sampling_params: SamplingParams | None = None) -> APIFuture[SampleResponse]:
        return self.training_client.sample([prompt], sampling_params, num_samples, self.model_path)

    async def sample_async(self, prompt, num_samples: int = 1, sampling_params=None) -> APIFuture:
        return await self.training_client.sample_async([prompt], sampling_params, num_samples, self.model_path)


class ServiceClient:
    """The entry point: `ServiceClient(base_url, api_key)` (defaults: `KEEL_BASE_URL`, `KEEL_API_KEY`)."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 max_retries: int = 4) -> None:
        base_url = base_url or os.environ.get("KEEL_BASE_URL") or "http://127.0.0.1:8000"
        api_key = api_key or os.environ.get("KEEL_API_KEY")
        if not api_key:
            raise KeelError("no API key: pass api_key or set KEEL_API_KEY")
        self._http = _Http(base_url, api_key, timeout, max_retries)

    def _create(self, body: dict[str, Any]) -> TrainingClient:
        return TrainingClient(self._http, self._http.request("POST", "/v1/trainers", json=body, idempotent_key=True))

    @staticmethod
    def _body(base_model: str, lora: dict[str, Any] | None, seed: int | None, **options: Any) -> dict[str, Any]:
        body = {"model": base_model, "lora": lora, **{k: v for k, v in options.items() if v is not None}}
        if seed is not None:
            body["seed"] = seed
        return body

    def create_lora_training_client(self, base_model: str, rank: int = 32, *, alpha: int = 16,
                                    target_modules: str | list[str] = "all-linear", seed: int | None = None,
                                    resources: dict[str, float] | None = None, dtype: str | None = None,
                                    idle_timeout_s: int | None = None,
                                    metadata: dict[str, str] | None = None) -> TrainingClient:
        """A new trainer of LoRA adapters (`rank`, `alpha`, `target_modules`) on `base_model` (a Keel model
        id, a checkpoint id, a hub id, or a directory under the deployment's model roots)."""
        lora = {"rank": rank, "alpha": alpha, "target_modules": target_modules}
        return self._create(self._body(base_model, lora, seed, resources=resources, dtype=dtype,
                                       idle_timeout_s=idle_timeout_s, metadata=metadata))

    def create_training_client(self, base_model: str, *, seed: int | None = None,
                               resources: dict[str, float] | None = None, dtype: str | None = None,
                               idle_timeout_s: int | None = None,
                               metadata: dict[str, str] | None = None) -> TrainingClient:
        """A new trainer that trains every weight of `base_model` (full fine-tuning)."""
        return self._create(self._body(base_model, None, seed, resources=resources, dtype=dtype,
                                       idle_timeout_s=idle_timeout_s, metadata=metadata))

    async def create_lora_training_client_async(self, base_model: str, rank: int = 32, **options: Any) -> TrainingClient:
        return await asyncio.to_thread(self.create_lora_training_client, base_model, rank, **options)

    def training_client(self, trainer_id: str) -> TrainingClient:
        """A client of an existing trainer."""
        return TrainingClient(self._http, self._http.request("GET", f"/v1/trainers/{trainer_id}"))

    def close(self) -> None:
        self._http.close()

    async def aclose(self) -> None:
        await self._http.aclose()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["APIFuture", "AdamParams", "Datum", "KeelError", "ModelInput", "OperationFailed", "SamplingClient",
           "SamplingParams", "ServiceClient", "TensorData", "TrainingClient", "types"]
