"""Interactive trainers: the trainer, its operations and events; models saved by a trainer

Revision ID: 0006_trainers
Revises: 0005_webhooks
Create Date: 2026-12-12 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0006_trainers'
down_revision = '0005_webhooks'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
_TS = sa.DateTime(timezone=True)
_BIGID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    op.create_table(
        'trainer',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('model', sa.String(length=500), nullable=False),
        sa.Column('base_model_path', sa.String(length=1000), nullable=False),
        sa.Column('lora', _JSON, nullable=True),
        sa.Column('resources', _JSON, nullable=False),
        sa.Column('seed', sa.Integer(), nullable=False),
        sa.Column('dtype', sa.String(length=10), nullable=False),
        sa.Column('idle_timeout_s', sa.Integer(), nullable=False),
        sa.Column('metadata', _JSON, nullable=False),
        sa.Column('vocab_size', sa.Integer(), nullable=True),
        sa.Column('context_window', sa.Integer(), nullable=True),
        sa.Column('step', sa.Integer(), nullable=False),
        sa.Column('tokens', sa.BigInteger(), nullable=False),
        sa.Column('state_path', sa.String(length=1000), nullable=True),
        sa.Column('state_step', sa.Integer(), nullable=True),
        sa.Column('auto_saves', sa.Integer(), nullable=False),
        sa.Column('last_op_seq', sa.Integer(), nullable=False),
        sa.Column('last_event_seq', sa.Integer(), nullable=False),
        sa.Column('lease_owner', sa.String(length=200), nullable=True),
        sa.Column('lease_until', _TS, nullable=True),
        sa.Column('dispatched_at', _TS, nullable=True),
        sa.Column('error', _JSON, nullable=True),
        sa.Column('created_by', sa.String(length=40), nullable=True),
        sa.Column('created_at', _TS, nullable=False),
        sa.Column('last_used_at', _TS, nullable=False),
        sa.Column('released_at', _TS, nullable=True),
        sa.Column('deleted_at', _TS, nullable=True),
        sa.ForeignKeyConstraint(['created_by'], ['api_key.id'], name=op.f('fk_trainer_created_by_api_key'),
                                ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_trainer_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_trainer')),
    )
    op.create_index(op.f('ix_trainer_project_id'), 'trainer', ['project_id'])
    op.create_index(op.f('ix_trainer_created_at'), 'trainer', ['created_at'])
    op.create_index('ix_trainer_status_last_used_at', 'trainer', ['status', 'last_used_at'])
    op.create_table(
        'trainer_operation',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('trainer_id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=40), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('request', _JSON, nullable=False),
        sa.Column('result', _JSON, nullable=True),
        sa.Column('error', _JSON, nullable=True),
        sa.Column('tokens', sa.BigInteger(), nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.Column('started_at', _TS, nullable=True),
        sa.Column('finished_at', _TS, nullable=True),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_trainer_operation_project_id_project'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['trainer_id'], ['trainer.id'], name=op.f('fk_trainer_operation_trainer_id_trainer'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_trainer_operation')),
        sa.UniqueConstraint('trainer_id', 'seq', name='uq_trainer_operation_trainer_id_seq'),
    )
    op.create_index('ix_trainer_operation_project_id_created_at', 'trainer_operation', ['project_id', 'created_at'])
    op.create_table(
        'trainer_event',
        sa.Column('id', _BIGID, autoincrement=True, nullable=False),
        sa.Column('trainer_id', sa.String(length=40), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('type', sa.String(length=40), nullable=False),
        sa.Column('data', _JSON, nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['trainer_id'], ['trainer.id'], name=op.f('fk_trainer_event_trainer_id_trainer'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_trainer_event')),
        sa.UniqueConstraint('trainer_id', 'seq', name='uq_trainer_event_trainer_id_seq'),
    )
    with op.batch_alter_table('model') as batch:
        batch.add_column(sa.Column('trainer_id', sa.String(length=40), nullable=True))
        batch.create_foreign_key(op.f('fk_model_trainer_id_trainer'), 'trainer', ['trainer_id'], ['id'],
                                 ondelete='SET NULL')


def downgrade() -> None:
    with op.batch_alter_table('model') as batch:
        batch.drop_constraint(op.f('fk_model_trainer_id_trainer'), type_='foreignkey')
        batch.drop_column('trainer_id')
    op.drop_table('trainer_event')
    op.drop_index('ix_trainer_operation_project_id_created_at', table_name='trainer_operation')
    op.drop_table('trainer_operation')
    op.drop_index('ix_trainer_status_last_used_at', table_name='trainer')
    op.drop_index(op.f('ix_trainer_created_at'), table_name='trainer')
    op.drop_index(op.f('ix_trainer_project_id'), table_name='trainer')
    op.drop_table('trainer')
