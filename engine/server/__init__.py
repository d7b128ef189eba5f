"""The engine server: OpenAI-compatible HTTP serving over ``SpecEngine`` with continuous batching, live per-workload
speculation configs, step statistics (``/stats``) and Prometheus metrics (``/metrics``)."""
