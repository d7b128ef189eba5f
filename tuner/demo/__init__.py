"""``spectune demo``: the end-to-end run. Engine and sidecar as subprocesses, traffic from the shipped workloads, the
controller steering live, a short replay search per workload saved as profiles, the engine restarted on them, and a
measured off-vs-tuned table with an HTML report. ``tuner.demo.run.run_demo`` is the entry point."""
