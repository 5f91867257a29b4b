"""Inference calls recorded under a trajectory: prompt and completion token ids and log-probs

Revision ID: 0011_trajectory_calls
Revises: 0010_tinker_samplers
Create Date: 2026-12-20 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0011_trajectory_calls'
down_revision = '0010_tinker_samplers'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'trajectory_call',
        sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
        sa.Column('trajectory_id', sa.String(length=200), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('model', sa.String(length=500), nullable=False),
        sa.Column('choice_index', sa.Integer(), nullable=False),
        sa.Column('prompt_token_ids', _JSON, nullable=False),
        sa.Column('completion_token_ids', _JSON, nullable=False),
        sa.Column('logprobs', _JSON, nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_trajectory_call_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_trajectory_call')),
    )
    op.create_index('ix_trajectory_call_project_id_trajectory_id', 'trajectory_call', ['project_id', 'trajectory_id'])


def downgrade() -> None:
    op.drop_index('ix_trajectory_call_project_id_trajectory_id', table_name='trajectory_call')
    op.drop_table('trajectory_call')
