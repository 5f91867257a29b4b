"""A job's reproducibility manifest (`GET /v1/jobs/{id}/manifest`), recorded when an attempt starts

Revision ID: 0008_job_manifest
Revises: 0007_dispatch_wakeup
Create Date: 2026-12-16 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0008_job_manifest'
down_revision = '0007_dispatch_wakeup'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.add_column(sa.Column('manifest', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.drop_column('manifest')
