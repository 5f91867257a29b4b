"""A trajectory's outcome: the client's reward and group, and the training snapshot that took it

Revision ID: 0012_trajectory_reward
Revises: 0011_trajectory_calls
Create Date: 2026-12-21 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0012_trajectory_reward'
down_revision = '0011_trajectory_calls'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'trajectory_reward',
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('trajectory_id', sa.String(length=200), nullable=False),
        sa.Column('reward', sa.Float(), nullable=False),
        sa.Column('group_id', sa.String(length=200), nullable=True),
        sa.Column('metadata', _JSON, nullable=False),
        sa.Column('completed_at', _TS, nullable=False),
        sa.Column('consumed_by', sa.String(length=40), nullable=True),
        sa.Column('consumed_at', _TS, nullable=True),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_trajectory_reward_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('project_id', 'trajectory_id', name=op.f('pk_trajectory_reward')),
    )


def downgrade() -> None:
    op.drop_table('trajectory_reward')
