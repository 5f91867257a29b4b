"""Prometheus series of the inference routes, on the API's `/metrics` (api/metrics.py's registry):
requests, time to first token, generation speed, tokens and requests in flight, per base model and
endpoint. The `base_model` label is the root base model's name (the deployment's, as
`core.fine_tuned_models.base_name` gives it), never a tenant's model id or name: labels stay bounded
and reveal no project."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

from api.metrics import REGISTRY

_LABELS = ["base_model", "endpoint"]

REQUESTS = Counter("keel_inference_requests", "Completion requests forwarded to Serve, by outcome (ok, error, "
                   "unavailable).", [*_LABELS, "outcome"], registry=REGISTRY)
IN_FLIGHT = Gauge("keel_inference_in_flight", "Completion requests this API process is waiting on or streaming "
                  "(the queue depth it sees).", _LABELS, registry=REGISTRY)
FIRST_TOKEN = Histogram("keel_inference_time_to_first_token_seconds", "Seconds from forwarding a streamed "
                        "request to its first generated token.", _LABELS, registry=REGISTRY,
                        buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
DURATION = Histogram("keel_inference_request_duration_seconds", "Seconds from forwarding a request to its "
                     "last byte.", _LABELS, registry=REGISTRY,
                     buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0))
SPEED = Histogram("keel_inference_tokens_per_second", "Completion tokens per second of one request (after its "
                  "first token when streamed).", _LABELS, registry=REGISTRY,
                  buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000))
TOKENS = Counter("keel_inference_tokens", "Tokens processed, by kind (prompt, completion); rate() is tokens/s.",
                 [*_LABELS, "kind"], registry=REGISTRY)


class Call:
    """One forwarded request's figures; `finish` records them once."""

    def __init__(self, base_model: str, endpoint: str) -> None:
        self.labels = (base_model, endpoint)
        self.started = time.monotonic()
        self.first: float | None = None
        self.done = False
        IN_FLIGHT.labels(*self.labels).inc()

    def first_token(self) -> None:
        if self.first is None:
            self.first = time.monotonic()
            FIRST_TOKEN.labels(*self.labels).observe(self.first - self.started)

    def finish(self, outcome: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        if self.done:
            return
        self.done = True
        now = time.monotonic()
        IN_FLIGHT.labels(*self.labels).dec()
        REQUESTS.labels(*self.labels, outcome).inc()
        DURATION.labels(*self.labels).observe(now - self.started)
        TOKENS.labels(*self.labels, "prompt").inc(max(0, int(prompt_tokens or 0)))
        TOKENS.labels(*self.labels, "completion").inc(max(0, int(completion_tokens or 0)))
        spent = now - (self.first or self.started)
        if completion_tokens and spent > 0:
            SPEED.labels(*self.labels).observe(completion_tokens / spent)
