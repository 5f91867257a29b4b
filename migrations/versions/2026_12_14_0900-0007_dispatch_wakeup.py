"""A queued job nobody has sent wakes the dispatchers: NOTIFY keel_dispatch (PostgreSQL only)

The API does not publish the jobs it creates: the workers' sweepers send every queued job whose
`dispatched_at` is null (`workers.sweeper.dispatch_pending`). This trigger tells them at once, at the
commit of any change that leaves such a row (a create, a resume, a re-queue after a lost worker, a
job a worker deferred), instead of at their next periodic pass. SQLite has no NOTIFY: there the
sweepers look for new jobs every `WAKEUP_GAP_S` (`workers.sweeper`).

Revision ID: 0007_dispatch_wakeup
Revises: 0006_trainers
Create Date: 2026-12-14 09:00:00.000000
"""
from __future__ import annotations

from alembic import op

revision = '0007_dispatch_wakeup'
down_revision = '0006_trainers'
branch_labels = None
depends_on = None

CHANNEL = 'keel_dispatch'  # workers.wakeup.CHANNEL


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    # One notification per transaction at most: PostgreSQL folds identical ones (same channel and
    # payload) raised in one transaction into one.
    op.execute(f"""
        CREATE FUNCTION keel_job_awaits_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END $$""")
    op.execute("""
        CREATE TRIGGER job_awaits_dispatch AFTER INSERT OR UPDATE OF status, dispatched_at ON job
        FOR EACH ROW WHEN (NEW.status = 'queued' AND NEW.dispatched_at IS NULL)
        EXECUTE FUNCTION keel_job_awaits_dispatch()""")


def downgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return
    op.execute("DROP TRIGGER IF EXISTS job_awaits_dispatch ON job")
    op.execute("DROP FUNCTION IF EXISTS keel_job_awaits_dispatch()")
