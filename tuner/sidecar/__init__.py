"""The tuner sidecar: a FastAPI service (profiles, recommendations, decisions, engine startup profiles, metrics) and the
controller that steers a running engine."""
