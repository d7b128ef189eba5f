"""A progress bar over a study's finished trials (every worker's), with the best value so far."""

from __future__ import annotations

import sys

import optuna
from tqdm import tqdm

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)


def finished_trials(study: optuna.Study) -> int:
    """Trials of every worker that ran to an end (complete, pruned or failed)."""
    return len(study.get_trials(deepcopy=False, states=FINISHED))


class TrialProgress:
    """``with TrialProgress(study, target) as bar: study.optimize(..., callbacks=[bar.callback])``."""

    def __init__(self, study: optuna.Study, target: int, *, enabled: bool = True) -> None:
        self._bar = tqdm(total=target, initial=min(finished_trials(study), target), desc=study.study_name,
                         unit="trial", disable=not enabled, file=sys.stderr, dynamic_ncols=True)

    def callback(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        done = min(finished_trials(study), self._bar.total)
        self._bar.update(done - self._bar.n)
        if trial.values is not None:
            self._bar.set_postfix_str(f"last {', '.join(f'{v:.4g}' for v in trial.values)}")

    def __enter__(self) -> TrialProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()
