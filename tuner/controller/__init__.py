"""The controller loop: per-workload aggregation, pricing, stabilised changes, rollback, drift and identification."""
