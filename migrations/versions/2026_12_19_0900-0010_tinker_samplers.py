"""The Tinker room's sampling sessions and the samples they asked for

Revision ID: 0010_tinker_samplers
Revises: 0009_tinker_sessions
Create Date: 2026-12-19 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010_tinker_samplers'
down_revision = '0009_tinker_sessions'
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'tinker_sampler',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('session_id', sa.String(length=40), nullable=False),
        sa.Column('sampling_session_seq_id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.String(length=40), nullable=False),
        sa.Column('trainer_id', sa.String(length=40), nullable=False),
        sa.Column('base_model', sa.String(length=500), nullable=False),
        sa.Column('model_path', sa.String(length=1000), nullable=True),
        sa.Column('model_id', sa.String(length=40), nullable=True),
        sa.Column('save_operation_id', sa.String(length=40), nullable=True),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['model_id'], ['model.id'], name=op.f('fk_tinker_sampler_model_id_model'),
                                ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['project_id'], ['project.id'], name=op.f('fk_tinker_sampler_project_id_project'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['save_operation_id'], ['trainer_operation.id'],
                                name=op.f('fk_tinker_sampler_save_operation_id_trainer_operation'), ondelete='SET NULL'),
        sa.ForeignKeyConstraint(['session_id'], ['tinker_session.id'],
                                name=op.f('fk_tinker_sampler_session_id_tinker_session'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['trainer_id'], ['trainer.id'], name=op.f('fk_tinker_sampler_trainer_id_trainer'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tinker_sampler')),
        sa.UniqueConstraint('session_id', 'sampling_session_seq_id',
                            name='uq_tinker_sampler_session_id_sampling_session_seq_id'),
    )
    op.create_index(op.f('ix_tinker_sampler_project_id'), 'tinker_sampler', ['project_id'])
    op.create_index(op.f('ix_tinker_sampler_trainer_id'), 'tinker_sampler', ['trainer_id'])
    op.create_table(
        'tinker_sample',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('sampler_id', sa.String(length=40), nullable=False),
        sa.Column('seq_id', sa.BigInteger(), nullable=False),
        sa.Column('operation_id', sa.String(length=40), nullable=False),
        sa.Column('num_samples', sa.Integer(), nullable=False),
        sa.Column('created_at', _TS, nullable=False),
        sa.ForeignKeyConstraint(['operation_id'], ['trainer_operation.id'],
                                name=op.f('fk_tinker_sample_operation_id_trainer_operation'), ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['sampler_id'], ['tinker_sampler.id'],
                                name=op.f('fk_tinker_sample_sampler_id_tinker_sampler'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_tinker_sample')),
        sa.UniqueConstraint('operation_id', name=op.f('uq_tinker_sample_operation_id')),
        sa.UniqueConstraint('sampler_id', 'seq_id', name='uq_tinker_sample_sampler_id_seq_id'),
    )


def downgrade() -> None:
    op.drop_table('tinker_sample')
    op.drop_index(op.f('ix_tinker_sampler_trainer_id'), table_name='tinker_sampler')
    op.drop_index(op.f('ix_tinker_sampler_project_id'), table_name='tinker_sampler')
    op.drop_table('tinker_sampler')
