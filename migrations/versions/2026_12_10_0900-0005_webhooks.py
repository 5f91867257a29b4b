"""Webhooks and their delivery outbox, event-log cursors of worker-side consumers, project secrets

Revision ID: 0005_webhooks
Revises: 0004_eval
Create Date: 2026-12-10 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0005_webhooks'
down_revision = '0004_eval'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'webhook',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('url', sa.String(length=2000), nullable=False),
        sa.Column('event_types', _JSON, nullable=False),
        sa.Column('secret', sa.Text(), nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_webhook_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook')),
    )
    op.create_index(op.f('ix_webhook_project_id'), 'webhook', ['project_id'])
    op.create_table(
        'webhook_delivery',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('webhook_id', sa.String(length=40), nullable=False),
        sa.Column('job_id', sa.String(length=40), nullable=False),
        sa.Column('event_seq', sa.Integer(), nullable=False),
        sa.Column('event_type', sa.String(length=40), nullable=False),
        sa.Column('payload', _JSON, nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', _TS, nullable=True),
        sa.Column('claimed_by', sa.String(length=200), nullable=True),
        sa.Column('last_status_code', sa.Integer(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('created_at', _TS, nullable=False),
        sa.Column('delivered_at', _TS, nullable=True),
        sa.ForeignKeyConstraint(['job_id'], ['job.id'], name=op.f('fk_webhook_delivery_job_id_job'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['webhook_id'], ['webhook.id'], name=op.f('fk_webhook_delivery_webhook_id_webhook'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_delivery')),
        sa.UniqueConstraint('webhook_id', 'job_id', 'event_seq', name='uq_webhook_delivery_webhook_id_job_id_event_seq'),
    )
    op.create_index('ix_webhook_delivery_due', 'webhook_delivery', ['status', 'next_attempt_at'])
    op.create_index(op.f('ix_webhook_delivery_webhook_id'), 'webhook_delivery', ['webhook_id'])
    op.create_table(
        'event_cursor',
        sa.Column('consumer', sa.String(length=40), nullable=False),
        sa.Column('job_id', sa.String(length=40), nullable=False),
        sa.Column('last_seq', sa.Integer(), nullable=False),
        sa.Column('done', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('owner', sa.String(length=200), nullable=True),
        sa.Column('lease_until', _TS, nullable=True),
        sa.Column('state', _JSON, nullable=False),
        sa.ForeignKeyConstraint(['job_id'], ['job.id'], name=op.f('fk_event_cursor_job_id_job'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('consumer', 'job_id', name=op.f('pk_event_cursor')),
    )
    op.create_table(
        'project_secret',
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.Column('updated_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_project_secret_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('project_id', 'name', name=op.f('pk_project_secret')),
    )


def downgrade() -> None:
    op.drop_table('project_secret')
    op.drop_table('event_cursor')
    op.drop_index(op.f('ix_webhook_delivery_webhook_id'), table_name='webhook_delivery')
    op.drop_index('ix_webhook_delivery_due', table_name='webhook_delivery')
    op.drop_table('webhook_delivery')
    op.drop_index(op.f('ix_webhook_project_id'), table_name='webhook')
    op.drop_table('webhook')
