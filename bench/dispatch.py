"""What one dispatch pass of a sweeper costs while many jobs wait for a full cluster.

    python -m bench.dispatch [--jobs 500] [--projects 10] [--passes 20] --json

A woken sweeper (`workers.wakeup`) runs `workers.sweeper.dispatch_pending` up to four times a second
during a burst of creates, so its cost per pass, paid in every worker's main process, matters when
the queue is long. This benchmark makes a scratch PostgreSQL database (created on the local server,
migrated, dropped afterwards), queues --jobs PPO jobs (their specs as the API stores them, about
3 KB each) over --projects projects, publishes one node with no free CPU, and times --passes passes
that send nothing (the broker is never reached: nothing fits). Figures: CPU and wall ms per pass,
median/min/max.

Environment: KEEL_BENCH_PG_ADMIN_URL (default postgresql+psycopg://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import tempfile
import time

from bench.common import drop_database, emit, load_average, spread

PG_ADMIN = os.environ.get("KEEL_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def _queue(jobs: int, projects: int) -> None:
    from api.schemas.jobs import JobCreate
    from core.capacity import Node, publish
    from core.db import session_scope
    from core.models import File, Job
    from core.security import get_or_create_project

    spec = JobCreate.model_validate({"model": "org/name", "training_file": "file-x", "method": {
        "type": "ppo", "reward": {"function": "gsm8k"}}}).model_dump(mode="json")
    spec["resources"]["cpus_per_worker"] = 2.0
    with session_scope() as db:
        owners = []
        for i in range(projects):
            project, _ = get_or_create_project(db, f"bench-{i}")
            file = File(project_id=project.id, purpose="prompts", filename="p.jsonl", bytes=1,
                        sha256=f"{i:064x}", format="jsonl", storage_key=f"files/bench-{i}")
            db.add(file)
            db.flush()
            owners.append((project.id, file.id))
    with session_scope() as db:
        for i in range(jobs):
            project_id, file_id = owners[i % projects]
            db.add(Job(project_id=project_id, status="queued", method="ppo", spec=spec, model="org/name",
                       training_file_id=file_id))
    with session_scope() as db:
        publish(db, "bench", [Node("bench-node", "127.0.0.1", 2.0, 0.0, 0.0, 0.0)])


def _passes(n: int) -> tuple[list[float], list[float]]:
    from workers import dispatch
    from workers.sweeper import dispatch_pending

    def refuse(job_id: str) -> None:
        raise AssertionError(f"nothing fits, yet {job_id} was sent")

    dispatch._publish = refuse  # this process only
    cpu, wall = [], []
    dispatch_pending()  # warm-up: imports, the pool's first connection
    for _ in range(n):
        c, w = time.process_time(), time.perf_counter()
        dispatch_pending()
        cpu.append((time.process_time() - c) * 1e3)
        wall.append((time.perf_counter() - w) * 1e3)
    return cpu, wall


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=500, help="queued jobs (a pass reads at most 500)")
    p.add_argument("--projects", type=int, default=10)
    p.add_argument("--passes", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    from sqlalchemy import create_engine, text

    name = f"keel_bench_dispatch_{os.getpid()}_{secrets.token_hex(3)}"
    home = tempfile.mkdtemp(prefix="keel-bench-dispatch-")
    os.environ.update({"KEEL_DATABASE_URL": PG_ADMIN.rsplit("/", 1)[0] + "/" + name, "KEEL_HOME": home,
                       "KEEL_STORAGE_URL": os.path.join(home, "artifacts")})
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    load = load_average()
    try:
        from core import migrate
        from core.config import settings

        if name not in settings.database_url:  # never a real database's jobs
            raise SystemExit("bench.dispatch: core.config was loaded before the scratch database was set")
        migrate.upgrade()
        _queue(args.jobs, args.projects)
        cpu, wall = _passes(args.passes)
    finally:
        drop_database(PG_ADMIN, name)
        shutil.rmtree(home, ignore_errors=True)
    result = {"bench": "dispatch", "jobs": args.jobs, "projects": args.projects, "passes": args.passes,
              "cpu_ms_per_pass": spread(cpu), "wall_ms_per_pass": spread(wall),
              "load_avg_1m": load, "load_avg_1m_after": load_average()}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
