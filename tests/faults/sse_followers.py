"""An SSE client in a thread: the SDK's `keel_client.stream_events` (which resumes with `Last-Event-ID`
after a dropped connection) following one job until `job.done`."""

from __future__ import annotations

import threading
import time


class Follower(threading.Thread):
    """Collects the seqs of the job's events it is given, and when each arrived (monotonic)."""

    def __init__(self, stack, job_id: str, timeout_s: float = 240.0) -> None:
        super().__init__(daemon=True, name=f"keel-follow-{job_id}")
        self.stack, self.job_id, self.timeout_s = stack, job_id, timeout_s
        self.seqs: list[int] = []
        self.received_at: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from keel_client import stream_events

        try:
            with self.stack.sdk() as client:
                for event in stream_events(client, self.job_id, timeout_s=self.timeout_s, backoff_s=0.2):
                    self.seqs.append(event.seq)
                    self.received_at.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
