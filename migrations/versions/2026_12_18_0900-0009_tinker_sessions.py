"""The Tinker room: sessions, their training clients (trainers) and the per-model request sequence

Revision ID: 0009_tinker_sessions
Revises: 0008_job_manifest
Create Date: 2026-12-18 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0009_tinker_sessions'
down_revision = '0008_job_manifest'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'tinker_session',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('api_key_id', sa.String(length=40), nullable=True),
        sa.Column('tags', _JSON, nullable=False),
        sa.Column('user_metadata', _JSON, nullable=False),
        sa.Column('sdk_version', sa.String(length=40), nullable=False),
        sa.Column('display_name', sa.String(length=200), nullable=True),
        sa.Column('created_at', _TS, nullable=False),
        sa.Column('heartbeat_at', _TS, nullable=False),
        sa.Column('finished_at', _TS, nullable=True),
        sa.Column('finish_reason', sa.String(length=20), nullable=True),
        sa.Column('finish_detail', sa.String(length=1000), nullable=True),
        sa.ForeignKeyConstraint(['api_key_id'], ['api_key.id'], name=op.f('fk_tinker_session_api_key_id_api_key'),
                                ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_tinker_session_project_id_project'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tinker_session')),
    )
    op.create_index(op.f('ix_tinker_session_project_id'), 'tinker_session', ['project_id'])
    op.create_table(
        'tinker_model',
        sa.Column('id', sa.String(length=80), nullable=False),
        sa.Column('session_id', sa.String(length=40), nullable=False),
        sa.Column('model_seq_id', sa.Integer(), nullable=False),
        sa.Column('trainer_id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('base_model', sa.String(length=500), nullable=False),
        sa.Column('user_metadata', _JSON, nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_tinker_model_project_id_project'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['session_id'], ['tinker_session.id'],
                                name=op.f('fk_tinker_model_session_id_tinker_session'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['trainer_id'], ['trainer.id'], name=op.f('fk_tinker_model_trainer_id_trainer'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tinker_model')),
        sa.UniqueConstraint('trainer_id', name=op.f('uq_tinker_model_trainer_id')),
    )
    op.create_index(op.f('ix_tinker_model_project_id'), 'tinker_model', ['project_id'])
    op.create_index(op.f('ix_tinker_model_session_id'), 'tinker_model', ['session_id'])
    op.create_table(
        'tinker_request',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('model_id', sa.String(length=80), nullable=False),
        sa.Column('seq_id', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=40), nullable=False),
        sa.Column('operation_id', sa.String(length=40), nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['model_id'], ['tinker_model.id'], name=op.f('fk_tinker_request_model_id_tinker_model'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['operation_id'], ['trainer_operation.id'],
                                name=op.f('fk_tinker_request_operation_id_trainer_operation'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tinker_request')),
        sa.UniqueConstraint('model_id', 'seq_id', name='uq_tinker_request_model_id_seq_id'),
        sa.UniqueConstraint('operation_id', name=op.f('uq_tinker_request_operation_id')),
    )


def downgrade() -> None:
    op.drop_table('tinker_request')
    op.drop_index(op.f('ix_tinker_model_session_id'), table_name='tinker_model')
    op.drop_index(op.f('ix_tinker_model_project_id'), table_name='tinker_model')
    op.drop_table('tinker_model')
    op.drop_index(op.f('ix_tinker_session_project_id'), table_name='tinker_session')
    op.drop_table('tinker_session')
