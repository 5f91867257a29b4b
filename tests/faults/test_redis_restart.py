"""Redis (the broker and the live fan-out, as deployed) crashes and comes back in the middle of a job.

Publishes made while it is down are lost, but an event is committed to PostgreSQL before it is
published: the job runs on, SSE clients get every event (the API's listener reconnects and re-reads
the table), publishing works again once Redis is back, and so does the broker (the next job runs).
"""

from __future__ import annotations

import time

import pytest
import redis
from fault_processes import wait_until
from fault_stack import assert_step_log
from sse_followers import Follower

from core.events import CHANNEL_PREFIX, channel
from core.models import utcnow

pytestmark = [pytest.mark.faults, pytest.mark.slow]

STEPS, SAVE_FREQ = 150, 50
"""20-50 ms a step: the job runs on through the 2 s outage and past the restart, so the followers
must get events both before and after it."""
DOWN_S = 2.0


def test_redis_restart_mid_job_loses_no_event(stack):
    job_id = stack.create_sft_job(STEPS, SAVE_FREQ)
    followers = [Follower(stack, job_id) for _ in range(2)]
    for follower in followers:
        follower.start()
    stack.wait_event(job_id, lambda e: e.type == "job.metrics" and e.data["step"] >= 2, 180, "step 2")

    killed_at = utcnow()
    stack.redis.kill()
    time.sleep(DOWN_S)
    stack.redis.start()
    restarted_at, restarted = utcnow(), time.monotonic()

    job = stack.wait_terminal(job_id, 180)
    assert (job.status, job.attempts, job.error) == ("succeeded", 1, None)
    events = stack.events(job_id)
    assert_step_log(events, total_steps=STEPS, save_freq=SAVE_FREQ, statuses=["running", "succeeded"])
    unpublished = [e.seq for e in events if killed_at < e.created_at < restarted_at]
    assert unpublished, "no event was committed while Redis was down"
    for follower in followers:
        follower.join(60)
        assert follower.error is None, follower.error
        assert follower.seqs == [e.seq for e in events]  # every event, once, in order
        assert follower.received_at[0] < restarted < follower.received_at[-1]  # connected throughout

    # Redis is usable again by the processes that saw it die: the broker delivers the next job, and its
    # events are published live again.
    pubsub = redis.Redis(port=stack.redis.port, socket_timeout=5).pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(CHANNEL_PREFIX + "*")
    next_job = stack.create_sft_job(1)
    heard = wait_until(lambda: pubsub.get_message(timeout=0.5), 60, interval=0, what="a live event of the next job")
    pubsub.close()
    assert heard["channel"].decode() == channel(next_job)
    assert stack.wait_terminal(next_job, 120).status == "succeeded"
