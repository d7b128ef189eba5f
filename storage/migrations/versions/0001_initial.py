"""Workloads, versioned profiles (one active per workload and engine identity) and tuning runs.

Revision ID: 0001
Revises:
Create Date: 2025-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("features", sa.JSON(), nullable=True),
        sa.Column("next_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("next_version >= 1", name=op.f("ck_workloads_next_version_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("name", name=op.f("uq_workloads_name")),
    )
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("identity_key", sa.String(length=700), nullable=False),
        sa.Column("target_model", sa.String(length=200), nullable=True),
        sa.Column("draft_model", sa.String(length=200), nullable=True),
        sa.Column("dtype", sa.String(length=32), nullable=True),
        sa.Column("hardware", sa.String(length=200), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("schedule", sa.JSON(), nullable=True),
        sa.Column("measurements", sa.JSON(), nullable=True),
        sa.Column("provenance_kind", sa.String(length=16), nullable=False),
        sa.Column("study_name", sa.String(length=200), nullable=True),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("version >= 1", name=op.f("ck_profiles_version_positive")),
        sa.CheckConstraint("provenance_kind IN ('manual', 'optuna', 'online')",
                           name=op.f("ck_profiles_provenance_kind")),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_profiles_workload_id_workloads"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
        sa.UniqueConstraint("workload_id", "version", name=op.f("uq_profiles_workload_id_version")),
    )
    op.create_index("uq_profiles_one_active", "profiles", ["workload_id", "identity_key"], unique=True,
                    postgresql_where=sa.text("active"), sqlite_where=sa.text("active"))
    op.create_table(
        "tuning_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("study_name", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('replay', 'live', 'online')", name=op.f("ck_tuning_runs_kind")),
        sa.CheckConstraint("status IN ('running', 'succeeded', 'failed', 'cancelled')",
                           name=op.f("ck_tuning_runs_status")),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], name=op.f("fk_tuning_runs_workload_id_workloads"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_runs")),
    )
    op.create_index(op.f("ix_tuning_runs_workload_id"), "tuning_runs", ["workload_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_tuning_runs_workload_id"), table_name="tuning_runs")
    op.drop_table("tuning_runs")
    op.drop_index("uq_profiles_one_active", table_name="profiles")
    op.drop_table("profiles")
    op.drop_table("workloads")
