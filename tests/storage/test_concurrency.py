"""Eight processes put and activate profiles for the same workloads at once; nothing may be lost or doubly active."""

from __future__ import annotations

import multiprocessing
import random
from collections import defaultdict
from multiprocessing.synchronize import Barrier

from sqlalchemy import select

from storage import profiles
from storage.db import Database
from storage.identity import PORTABLE, EngineIdentity
from storage.models import Profile, Workload
from storage.schemas import ProfileCreate

PROCESSES = 8
ROUNDS = 8
WORKLOADS = ("chat", "code", "summarise")
IDENTITIES = (PORTABLE, EngineIdentity(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16"))


def _writer(url: str, worker: int, barrier: Barrier, results: multiprocessing.Queue) -> None:
    rng = random.Random(worker)
    created: list[tuple[str, int]] = []
    try:
        with Database(url) as db:
            barrier.wait(timeout=30)
            for round_ in range(ROUNDS):
                workload = WORKLOADS[(worker + round_) % len(WORKLOADS)]
                profile = ProfileCreate(config={"method": "ngram", "k": 1 + worker}, identity=rng.choice(IDENTITIES),
                                        provenance={"kind": "online", "note": f"worker {worker} round {round_}"})
                with db.session() as s:
                    created.append((workload, profiles.put_profile(s, workload, profile).version))
                if round_ % 2:
                    with db.session() as s:
                        versions = [r.version for r in profiles.history(s, workload)]
                        profiles.activate(s, workload, rng.choice(versions))
        results.put((worker, created, None))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put((worker, created, repr(exc)))


def test_concurrent_writers_lose_nothing_and_keep_one_active(db: Database) -> None:
    url = db.url.render_as_string(hide_password=False)
    db.dispose()  # the children must not share the parent's pooled connections
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
    workers = [ctx.Process(target=_writer, args=(url, i, barrier, results)) for i in range(PROCESSES)]
    for w in workers:
        w.start()
    reports = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)

    assert [error for _, _, error in reports if error] == []
    created = sorted(pair for _, pairs, _ in reports for pair in pairs)
    assert len(created) == PROCESSES * ROUNDS

    with db.session(readonly=True) as s:
        rows = s.execute(select(Workload.name, Workload.next_version, Profile.version, Profile.identity_key,
                                Profile.active).join(Profile, Profile.workload_id == Workload.id)).all()
    stored = sorted((name, version) for name, _, version, _, _ in rows)
    assert stored == created  # every put is there, none twice

    versions: dict[str, list[int]] = defaultdict(list)
    active: dict[tuple[str, str], int] = defaultdict(int)
    identities: set[tuple[str, str]] = set()
    for name, next_version, version, key, is_active in rows:
        versions[name].append(version)
        identities.add((name, key))
        active[name, key] += is_active
        assert next_version == len([r for r in rows if r[0] == name]) + 1
    for name, numbers in versions.items():
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), name
    assert {pair: active[pair] for pair in identities} == {pair: 1 for pair in identities}
