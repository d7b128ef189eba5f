"""Optuna searches over speculation configs: search space, replay and live scoring, studies in the storage database,
confirmation on the live engine and the saved profile. The entry point is ``tuner.tuning.study.tune``."""
