"""The controller's decisions: an audit trail per workload with the evidence behind each one.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("from_config", sa.JSON(), nullable=True),
        sa.Column("to_config", sa.JSON(), nullable=True),
        sa.Column("predicted_gain", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('apply', 'hold', 'rollback', 'drift', 'retune')", name=op.f("ck_decisions_kind")),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_decisions_workload_id_workloads"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    op.create_index(op.f("ix_decisions_workload_id"), "decisions", ["workload_id"], unique=False)
    op.create_index(op.f("ix_decisions_created_at"), "decisions", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_decisions_created_at"), table_name="decisions")
    op.drop_index(op.f("ix_decisions_workload_id"), table_name="decisions")
    op.drop_table("decisions")
