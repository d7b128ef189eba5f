"""What the sidecar's routes share: settings, the database, metrics, and the controller when one steers an engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.db import Database
from tuner.controller.loop import Controller
from tuner.sidecar.metrics import SidecarMetrics
from tuner.sidecar.settings import Settings
from tuner.tuning.routes import StudyManager


@dataclass
class SidecarState:
    settings: Settings
    db: Database
    metrics: SidecarMetrics = field(default_factory=SidecarMetrics)
    controller: Controller | None = None
    studies: StudyManager | None = None
