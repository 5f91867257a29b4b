"""`bench.embedded` reads each job's create, send and receipt from `keel up`'s log."""

from __future__ import annotations

import pytest

from bench.embedded import dispatch_delays

LOG = """\
2026-12-02 08:25:46,925 INFO api.routes.jobs: job created: sft [request_id=r1 job_id=job-a]
2026-12-02 08:25:47,025 INFO workers.sweeper: dispatched 1 queued job(s): ['job-a']
2026-12-02 08:25:47,125 INFO celery.worker.strategy: Task keel.run_job[1] received
2026-12-02 08:25:50,000 INFO api.routes.jobs: job created: sft [request_id=r2 job_id=job-b]
2026-12-02 08:25:50,250 INFO workers.sweeper: dispatched 1 queued job(s): ['job-b']
2026-12-02 08:25:51,000 INFO celery.worker.strategy: Task keel.run_job[2] received
"""


def test_delays_per_job():
    assert dispatch_delays(LOG, ["job-a", "job-b"]) == [pytest.approx((0.1, 0.2)), pytest.approx((0.25, 1.0))]


def test_a_job_never_received_is_an_error():
    with pytest.raises(RuntimeError, match="job-c"):
        dispatch_delays(LOG + "2026-12-02 08:25:52,000 INFO api.routes.jobs: job created: sft [job_id=job-c]\n",
                        ["job-c"])
