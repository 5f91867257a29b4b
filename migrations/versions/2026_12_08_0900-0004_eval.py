"""Result files of a job (evaluation jobs write one)

Revision ID: 0004_eval
Revises: 0003_keys
Create Date: 2026-12-08 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0004_eval'
down_revision = '0003_keys'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.add_column(sa.Column('result_files', sa.JSON().with_variant(postgresql.JSONB(), 'postgresql'),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.drop_column('result_files')
