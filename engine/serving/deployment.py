"""The Ray Serve application: an HTTP ingress on loopback and one autoscaled deployment per base model.

`start` runs the ingress (`keel-ingress`, route `/`) on Serve's HTTP proxy. The ingress reads the
request's `keel` member (docs/inference.md), creates the base model's application on its first
request (`keel-model-<digest>`: `ModelServer` with autoscaling from 0 replicas, a replica cap, and
one engine per replica) and forwards over a deployment handle, the LoRA adapter as the request's
multiplexed model id, so Serve routes it to a replica that already holds it. A replica keeps up to
`max_adapters` adapters (`serve.multiplexed`, least recently used evicted, and loaded again from
storage when asked for, never a 404).

Both classes are plain; each is wrapped by `serve.deployment` once, below.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from engine.errors import EngineError
from engine.serving.openai_shapes import ServingError, complete, prepare, sse, stream

log = logging.getLogger(__name__)

INGRESS_APP = "keel-ingress"
ROUTES = {"/v1/chat/completions": True, "/v1/completions": False}
DEFAULTS = {"max_replicas": 2, "max_adapters": 8, "max_batch": 32, "replica_cpus": 1.0, "replica_gpus": 0.0,
            "idle_s": 60.0, "storage_options": {}, "cache_dir": None}


def app_name(base_model: str) -> str:
    return "keel-model-" + hashlib.sha256(base_model.encode()).hexdigest()[:16]


def _unavailable() -> dict[str, Any]:
    return ServingError(503, "the model's replica failed; retry the request", code="model_unavailable",
                        type_="server_error").body()


class _LoadedAdapter:
    """What `serve.multiplexed` caches per adapter; eviction (`__del__`) drops it from the engine."""

    def __init__(self, engine: Any, name: str, adapter: Any) -> None:
        self.engine, self.name, self.adapter = engine, name, adapter

    def __del__(self) -> None:
        # Serve calls this on eviction and Python again at collection: drop only this load's adapter.
        if self.engine.adapters.get(self.name) is self.adapter:
            self.engine.drop_adapter(self.name)


class ModelServer:
    """One replica of a base model: its engine (CPU continuous batching, or vLLM with GPUs) and LoRA
    adapters multiplexed on it."""

    def __init__(self, base_model: str, options: dict[str, Any]) -> None:
        from ray import serve

        from engine.runtime.artifacts import Artifacts

        self.options = {**DEFAULTS, **options}
        self.artifacts = Artifacts(options=self.options["storage_options"], cache_dir=self.options["cache_dir"])
        path = self.artifacts.stage(base_model)
        if self.options["replica_gpus"] > 0:
            from engine.serving.vllm_engine import VllmEngine

            self.engine = VllmEngine(path, max_adapters=self.options["max_adapters"])
        else:
            from engine.serving.engine import CpuEngine

            self.engine = CpuEngine(path, max_batch=self.options["max_batch"])
        self.loads = 0

        async def load(adapter_ref: str) -> _LoadedAdapter:
            local = await asyncio.to_thread(self.artifacts.stage, adapter_ref)
            adapter = await asyncio.to_thread(self.engine.load_adapter, adapter_ref, local)
            self.loads += 1
            return _LoadedAdapter(self.engine, adapter_ref, adapter)

        self._adapter = serve.multiplexed(max_num_models_per_replica=self.options["max_adapters"])(load)

    async def _ready(self, body: dict[str, Any]) -> None:
        adapter = (body.get("keel") or {}).get("adapter")
        if adapter:
            try:
                await self._adapter(adapter)
            except (EngineError, FileNotFoundError) as e:
                raise ServingError(404, "the model's adapter cannot be read", param="model",
                                   code="model_not_found") from e

    async def complete(self, body: dict[str, Any], chat: bool) -> tuple[int, dict[str, Any]]:
        try:
            await self._ready(body)
            return 200, await complete(self.engine, prepare(body, chat, self.engine.tokenizer,
                                                            self.engine.max_model_len))
        except ServingError as e:
            return e.status, e.body()

    async def stream(self, body: dict[str, Any], chat: bool) -> AsyncIterator[Any]:
        """First item: the status (200, or an error's `(status, body)`); then SSE lines."""
        try:
            await self._ready(body)
            prepared = prepare(body, chat, self.engine.tokenizer, self.engine.max_model_len)
        except ServingError as e:
            yield (e.status, e.body())
            return
        yield 200
        async for line in stream(self.engine, prepared):
            yield line

    def info(self) -> dict[str, Any]:
        """This replica's process, batch and adapters (tests and the benchmark read it)."""
        stats = self.engine.stats()
        return {"pid": os.getpid(), "adapter_loads": self.loads, **stats}


class Ingress:
    """Serve's HTTP entry: routes a forwarded OpenAI request to its base model's deployment."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = {**DEFAULTS, **options}
        self.handles: dict[str, Any] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    async def handle(self, base_model: str) -> Any:
        """The base model's deployment handle, deploying its application on first use."""
        name = app_name(base_model)
        if name in self.handles:
            return self.handles[name]
        async with self.locks.setdefault(name, asyncio.Lock()):
            if name not in self.handles:
                await asyncio.to_thread(deploy_model, base_model, self.options)
                from ray import serve

                self.handles[name] = serve.get_app_handle(name)
        return self.handles[name]

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        if request.url.path == "/healthz":
            return JSONResponse({"status": "ok"})
        chat = ROUTES.get(request.url.path)
        if chat is None or request.method != "POST":
            return JSONResponse(ServingError(404, "no such route", code="not_found").body(), status_code=404)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(ServingError(400, "the body is not JSON", code="invalid_json").body(), status_code=400)
        base = (body.get("keel") or {}).get("base_model") if isinstance(body, dict) else None
        if not isinstance(base, str) or not base:
            return JSONResponse(ServingError(400, "keel.base_model is required", param="model",
                                             code="invalid_value").body(), status_code=400)
        adapter = (body.get("keel") or {}).get("adapter") or ""
        try:
            handle = (await self.handle(base)).options(multiplexed_model_id=adapter)
        except Exception:
            log.exception("deploying %s failed", base)
            return JSONResponse(ServingError(404, "the model cannot be served", param="model",
                                             code="model_not_found").body(), status_code=404)
        if not body.get("stream"):
            try:
                status, out = await _retried(lambda: handle.complete.remote(body, chat))
            except Exception:
                log.exception("a completion failed")
                return JSONResponse(_unavailable(), status_code=503)
            return JSONResponse(out, status_code=status)

        async def opened() -> tuple[Any, Any]:
            lines = handle.options(stream=True).stream.remote(body, chat)
            return lines, await lines.__anext__()

        try:
            lines, first = await _retried(opened)
        except Exception:
            log.exception("a stream failed to start")
            return JSONResponse(_unavailable(), status_code=503)
        if first != 200:
            return JSONResponse(first[1], status_code=first[0])

        async def rest() -> AsyncIterator[str]:
            try:
                async for line in lines:
                    yield line
            except Exception:  # the replica died mid-stream: one error event, no [DONE]
                log.exception("a stream broke")
                yield sse(_unavailable())

        return StreamingResponse(rest(), media_type="text/event-stream")


async def _retried(call: Any, attempts: int = 20) -> Any:
    """`await call()`, again while the replica it reached has died and Serve has not replaced it yet:
    nothing was generated for the caller, so the request goes to the new replica instead."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    for attempt in range(attempts):
        try:
            return await call()
        except (ActorDiedError, ActorUnavailableError, RayActorError):
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)


def deploy_model(base_model: str, options: dict[str, Any]) -> None:
    """Create (or update) the base model's application; returns once Serve accepted it."""
    from ray import serve

    from engine.runtime.cluster import code_options

    options = {**DEFAULTS, **options}
    idle = float(options["idle_s"])
    # Requests per replica the autoscaler aims at: half a batch, so a busy replica adds another early.
    target = max(1, options["max_batch"] // 2)
    deployment = ModelServerDeployment.options(
        name="model",
        autoscaling_config={"min_replicas": 0, "initial_replicas": 1, "max_replicas": int(options["max_replicas"]),
                            "target_ongoing_requests": target, "upscale_delay_s": 1.0,
                            "downscale_delay_s": idle, "downscale_to_zero_delay_s": idle},
        max_ongoing_requests=4 * options["max_batch"],
        ray_actor_options={"num_cpus": float(options["replica_cpus"]), "num_gpus": float(options["replica_gpus"]),
                           **code_options()})
    serve.run(deployment.bind(base_model, options), name=app_name(base_model), route_prefix=None,
              blocking=False)


def start(host: str = "127.0.0.1", port: int = 8100, options: dict[str, Any] | None = None) -> str:
    """Start Serve's HTTP proxy on `host:port` and the ingress on it (this process must be connected
    to Ray). Returns the ingress URL."""
    from ray import serve

    from engine.runtime.cluster import code_options

    serve.start(http_options={"host": host, "port": port})
    ingress = IngressDeployment.options(ray_actor_options={"num_cpus": 0, **code_options()})
    serve.run(ingress.bind(json.loads(json.dumps({**DEFAULTS, **(options or {})}))), name=INGRESS_APP,
              route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def build_app(args: dict[str, Any]) -> Any:
    """The ingress application for a Serve config file (KubeRay's `serveConfigV2`): `args.options`
    as `start`'s options."""
    from engine.runtime.cluster import code_options

    ingress = IngressDeployment.options(ray_actor_options={"num_cpus": 0, **code_options()})
    return ingress.bind({**DEFAULTS, **(args.get("options") or {})})


def _wrap() -> tuple[Any, Any]:
    from ray import serve

    return (serve.deployment(ModelServer, name="model"),
            serve.deployment(Ingress, name="ingress", max_ongoing_requests=10_000))


ModelServerDeployment, IngressDeployment = _wrap()
