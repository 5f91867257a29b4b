"""float16 loss scaling with several data-parallel workers (two local gloo processes): a
non-finite loss on one worker stops every worker's update together (issue 28, defect 3)."""

from __future__ import annotations

import datetime
import os

import torch

from bench.common import free_port
from engine.roles.trainable import TrainableRole
from engine.runtime.precision import Precision


class TinyFloat16(TrainableRole):
    """A trained role with float16 loss scaling: one Linear layer, AdamW."""

    def __init__(self, rank: int) -> None:
        super().__init__(rank=rank, world_size=2, seed=0)
        self.model = torch.nn.Linear(4, 3)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0)
        self.precision = Precision("float16", "cpu")
        self._init_grads()


def _nan_loss_worker(rank: int, port: int, queue) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # A worker left waiting in an all-reduce fails after this, instead of the default 30 minutes.
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=20))
    try:
        role = TinyFloat16(rank)
        finite_steps = []
        for step in range(3):  # the update's loop: a non-finite step ends it (then the step rolls back)
            with role.precision.autocast():
                loss = role.model(torch.full((2, 4), 0.1 * (rank + 1))).float().pow(2).mean()
            if step == 1 and rank == 1:
                loss = loss * float("nan")
            role.precision.backward(loss)
            _, finite = role._optimizer_step(1.0)
            finite_steps.append(finite)
            if not finite:
                break
        dist.barrier()
        queue.put((rank, finite_steps, {k: v.detach().numpy().copy() for k, v in role.model.state_dict().items()}))
    except Exception as err:  # noqa: BLE001 - reported to the test instead of a bare exit code
        queue.put((rank, repr(err), None))
    finally:
        dist.destroy_process_group()


def test_a_nan_loss_on_one_worker_stops_every_worker_together():
    """Rank 1's loss is NaN at the second step: both ranks see a failed step there (before, rank 0
    took it for an overflow the scaler absorbs, went on to the next step's gradient all-reduce and
    waited there for rank 1 until the timeout), and both keep the same weights."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_nan_loss_worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = {rank: (steps, weights) for rank, steps, weights in (queue.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    assert results[0][0] == results[1][0] == [True, False], results
    assert all(p.exitcode == 0 for p in procs)
    for key, value in results[0][1].items():
        assert (value == results[1][1][key]).all(), key
