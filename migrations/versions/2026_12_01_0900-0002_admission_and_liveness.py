"""admission control and liveness: job queue_reason, placement, controller heartbeat; cluster_node

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('cluster_node',
    sa.Column('node_id', sa.String(length=64), nullable=False),
    sa.Column('node_ip', sa.String(length=100), nullable=False),
    sa.Column('cpus_total', sa.Float(), nullable=False),
    sa.Column('cpus_available', sa.Float(), nullable=False),
    sa.Column('gpus_total', sa.Float(), nullable=False),
    sa.Column('gpus_available', sa.Float(), nullable=False),
    sa.Column('source', sa.String(length=200), nullable=False),
    sa.Column('observed_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('node_id', name=op.f('pk_cluster_node'))
    )
    op.create_index(op.f('ix_cluster_node_observed_at'), 'cluster_node', ['observed_at'], unique=False)
    with op.batch_alter_table('job') as batch:
        batch.add_column(sa.Column('controller_heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('queue_reason', sa.String(length=40), nullable=True))
        batch.add_column(sa.Column('placement', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()),
                                                                       'postgresql'), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.drop_column('placement')
        batch.drop_column('queue_reason')
        batch.drop_column('controller_heartbeat_at')
    op.drop_index(op.f('ix_cluster_node_observed_at'), table_name='cluster_node')
    op.drop_table('cluster_node')
