"""API key scopes and names; the key that created each job

Revision ID: 0003_keys
Revises: 0002
Create Date: 2026-12-05 09:00:00.000000
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003_keys'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_key') as batch:
        batch.add_column(sa.Column('name', sa.String(length=100), nullable=True))
        batch.add_column(sa.Column('admin', sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table('job') as batch:
        batch.add_column(sa.Column('created_by', sa.String(length=40), nullable=True))
        batch.create_foreign_key(op.f('fk_job_created_by_api_key'), 'api_key', ['created_by'], ['id'],
                                 ondelete='SET NULL')


def downgrade() -> None:
    with op.batch_alter_table('job') as batch:
        batch.drop_constraint(op.f('fk_job_created_by_api_key'), type_='foreignkey')
        batch.drop_column('created_by')
    with op.batch_alter_table('api_key') as batch:
        batch.drop_column('admin')
        batch.drop_column('name')
