"""Schemathesis over the sidecar's OpenAPI schema: generated requests (valid and not) never get a 5xx."""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from engine.config import SpecConfig
from storage import migrate
from storage.db import Database
from storage.profiles import put_profile
from storage.schemas import ProfileCreate
from tuner.sidecar.app import create_app
from tuner.sidecar.service import build_service
from tuner.sidecar.settings import Settings

TOKEN = "schema-token"
_DIR = Path(tempfile.mkdtemp(prefix="spectune-sidecar-schema-"))
_URL = f"sqlite:///{_DIR / 'sidecar.db'}"
with Database(_URL) as _db:
    migrate.upgrade(_db)
    with _db.session() as _s:  # something for reads, rollbacks and exports to find
        put_profile(_s, "code", ProfileCreate(config=SpecConfig(method="ngram", k=4)))
        put_profile(_s, "code", ProfileCreate(config=SpecConfig(method="ngram", k=8)))

APP = create_app(build_service(Settings(api_token=TOKEN, db_url=_URL)))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_no_server_errors(case: schemathesis.Case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])
