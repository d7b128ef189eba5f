"""spectune's engine vs transformers' own generate (target alone, assisted generation, prompt lookup) on the same
model objects, prompts and settings: greedy, same dtypes, same thread count, same max_new_tokens. Both sides also
draft with an int8 copy of the draft model (``load_model(..., dtype="int8")``), marked ", int8 draft".

    .venv/bin/python benchmarks/engine_vs_hf.py          # qwen2.5-coder-1.5b target, qwen2.5-coder-0.5b draft, bf16
    .venv/bin/python benchmarks/engine_vs_hf.py --quick  # smollm2-135m bf16 target, its fp32 copy as draft
    .venv/bin/python benchmarks/engine_vs_hf.py --dtype float32  # for a CPU without native bf16

One process, four phases: (1) the grid, one pass over every config, interleaved per prompt; (2) more passes over the
compared configs only (the equal-settings pairs and each side's two fastest in the grid), interleaved; (3) 4 concurrent
requests: spectune batched vs transformers one after another; (4) the target forward cost curve at a ~300-token
context, through spectune's BatchKV path and through a plain transformers forward with a DynamicCache.
Writes benchmarks/results/engine_vs_hf[_quick].{md,json}. ``--only PROMPT`` runs phases (1) and (2) for one prompt
(with more ``--reps`` where one comparison is too noisy) and writes engine_vs_hf[_quick]_PROMPT.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import DynamicCache
from transformers import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    ForwardLog,
    Spread,
    count_forwards,
    first_diff,
    geomean,
    interleaved,
    pin_threads,
    stopwatch,
)
from benchmarks.prompts import HUMANEVAL_MAIN, Prompt, build_prompts  # noqa: E402
from engine.config import OFF, SpecConfig, TreeShape  # noqa: E402
from engine.engine import Request, SpecEngine  # noqa: E402
from engine.kv import BatchKV, Nodes  # noqa: E402
from engine.models import LoadedModel, check_draft_compatible, hardware_fingerprint, load_model  # noqa: E402
from engine.models.cache import model_dir  # noqa: E402
from engine.sampling import SamplingParams  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROMPTS = ("humaneval", "edit", "prose")
CONCURRENT = ("humaneval", "humaneval2", "edit", "prose")
HF, ST = "transformers", "spectune"


@dataclass(frozen=True)
class HfConfig:
    """One way of calling transformers' ``generate``."""

    kind: Literal["alone", "assisted", "lookup"]
    k: int = 0
    int8: bool = False  # assisted generation with the int8 copy of the draft

    def label(self) -> str:
        return {"alone": "target alone", "assisted": f"assisted k={self.k}",
                "lookup": f"lookup k={self.k} n<=2"}[self.kind] + (INT8_MARK if self.int8 else "")


@dataclass(frozen=True)
class StConfig:
    """A spectune config and which copy of the draft model it drafts with."""

    spec: SpecConfig
    int8: bool = False

    def label(self) -> str:
        return self.spec.label() + (INT8_MARK if self.int8 else "")


Config = HfConfig | StConfig
INT8_MARK = ", int8 draft"
ST_OFF = StConfig(OFF)


def side(config: Config) -> str:
    return HF if isinstance(config, HfConfig) else ST


def label(config: Config) -> str:
    return config.label()


EQUAL: list[tuple[str, HfConfig, SpecConfig]] = [
    ("target alone", HfConfig("alone"), ST_OFF),
    ("draft k=4 chain", HfConfig("assisted", 4), StConfig(SpecConfig(method="draft", k=4))),
    ("draft k=4 chain, int8 draft", HfConfig("assisted", 4, int8=True),
     StConfig(SpecConfig(method="draft", k=4), int8=True)),
    ("n-gram k=4 n<=2", HfConfig("lookup", 4), StConfig(SpecConfig(method="ngram", k=4, min_n=1, max_n=2))),
]
HF_GRID = ([HfConfig("assisted", k) for k in (2, 4, 6)] + [HfConfig("assisted", k, int8=True) for k in (2, 3, 4, 6, 8)]
           + [HfConfig("lookup", k) for k in (4, 8, 12)])
ST_GRID = ([StConfig(SpecConfig(method="draft", k=k)) for k in (2, 4, 6)]
           + [StConfig(SpecConfig(method="draft", k=4, tree=TreeShape(branching=(2, 2))))]
           + [StConfig(SpecConfig(method="draft", k=k), int8=True) for k in (2, 3, 4, 6, 8)]
           + [StConfig(SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2))), int8=True),
              StConfig(SpecConfig(method="draft", k=4, tree=TreeShape(top_k=3, budget=10)), int8=True)]
           + [StConfig(SpecConfig(method="ngram", k=k, min_n=1, max_n=n)) for k in (4, 8, 12) for n in (2, 3)]
           + [StConfig(SpecConfig(method="ngram", k=k, min_n=1, max_n=2, ngram_match="first")) for k in (8, 12)])


@dataclass
class Sample:
    """One timed generation of one request (or, for a batch, the batch's totals)."""

    tokens_per_s: float
    seconds: float
    new_tokens: int
    target_forwards: int
    draft_forwards: int
    mean_acceptance_length: float
    outputs: list[list[int]]
    cpu_share: float  # process CPU s / (wall s x threads): drops when neighbours' load slows the run


def hf_acceptance(target: ForwardLog, prompt_len: int, new_tokens: int) -> float:
    """Mean acceptance length of a transformers run from its target forwards. Every call emits accepted + 1 tokens
    (assisted generation and prompt lookup fold the prefill into the first verify); a call drafted when it was fed
    more than the prompt (first call) or more than one token (later calls)."""
    drafting = sum(1 for i, (_, q) in enumerate(target.calls) if q > (prompt_len if i == 0 else 1))
    accepted = max(new_tokens - target.count, 0)
    return 1.0 + accepted / drafting if drafting else 1.0


class Bench:
    def __init__(self, target: LoadedModel, draft: LoadedModel, draft_int8: LoadedModel, max_new_tokens: int) -> None:
        self.target, self.max_new_tokens = target, max_new_tokens
        self.drafts = {False: draft, True: draft_int8}
        # the engine runs a model through its own faster decoder where it has one (packed bf16 linears, the fused int8
        # forward), transformers through the model's
        def decoders(loaded: LoadedModel) -> list:
            own = loaded.model.get_decoder()
            return [own] if loaded.decoder is own else [own, loaded.decoder]

        self.target_decoders = decoders(target)
        self.draft_decoders = decoders(draft) + decoders(draft_int8)
        self.pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else 0
        self._ids = 0

    @contextmanager
    def counted(self) -> Iterator[tuple[ForwardLog, list[ForwardLog]]]:
        """The target's forward calls (one side runs one of its decoders, so their logs concatenate in order) and
        the drafts'."""
        with count_forwards(*self.target_decoders, *self.draft_decoders) as logs:
            target = ForwardLog()
            yield target, logs[len(self.target_decoders):]
            target.calls = [call for log in logs[:len(self.target_decoders)] for call in log.calls]

    def run(self, config: Config, prompt_ids: list[int], max_new_tokens: int | None = None) -> Sample:
        if isinstance(config, HfConfig):
            return self.hf(config, prompt_ids, max_new_tokens)
        return self.spectune([config], [prompt_ids], max_new_tokens)

    @torch.inference_mode()
    def hf(self, config: HfConfig, prompt_ids: list[int], max_new_tokens: int | None = None) -> Sample:
        ids = torch.tensor([prompt_ids], device=self.target.device)
        kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=self.pad,
                      max_new_tokens=max_new_tokens or self.max_new_tokens)
        if config.kind == "assisted":
            draft = self.drafts[config.int8]
            gc = draft.model.generation_config
            gc.num_assistant_tokens = config.k  # reset every call: the heuristic schedule would persist its k
            gc.num_assistant_tokens_schedule = "constant"
            gc.assistant_confidence_threshold = 0.0  # v5 defaults to 0.4, which stops drafts early
            kwargs["assistant_model"] = draft.model
        elif config.kind == "lookup":
            kwargs.update(prompt_lookup_num_tokens=config.k, max_matching_ngram_size=2)
        with self.counted() as (t_log, d_logs), stopwatch() as watch:
            out = self.target.model.generate(ids, **kwargs)
        new = out[0, len(prompt_ids):].tolist()
        return Sample(len(new) / watch.wall_s, watch.wall_s, len(new), t_log.count, sum(d.count for d in d_logs),
                      hf_acceptance(t_log, len(prompt_ids), len(new)), [new], watch.cpu_share)

    @torch.inference_mode()
    def spectune(self, configs: list[StConfig], prompts: list[list[int]],
                 max_new_tokens: int | None = None) -> Sample:
        # transformers' target alone and prompt lookup never touch the draft; spectune's engine would prefill it for
        # every admitted request, so it gets the draft only when some request drafts with it
        drafting = {cfg.int8 for cfg in configs if cfg.spec.method == "draft"}
        if len(drafting) > 1:
            raise ValueError("one engine drafts with one copy of the draft model")
        draft = self.drafts[drafting.pop()] if drafting else None
        engine = SpecEngine(self.target, draft, max_batch=len(prompts))
        params = SamplingParams(max_new_tokens=max_new_tokens or self.max_new_tokens)
        requests = []
        for cfg, ids in zip(configs, prompts):
            self._ids += 1
            requests.append(Request(f"r{self._ids}", ids, params, cfg.spec))
        with self.counted() as (t_log, d_logs), stopwatch() as watch:
            done = engine.run(requests)
        seconds = watch.wall_s
        outputs = [done[r.request_id][0] for r in requests]
        summaries = [done[r.request_id][1] for r in requests]
        drafts = sum(s.drafts for s in summaries)
        mal = 1.0 + sum(s.accepted_tokens for s in summaries) / drafts if drafts else 1.0
        total = sum(len(o) for o in outputs)
        return Sample(total / seconds, seconds, total, t_log.count, sum(d.count for d in d_logs), mal, outputs,
                      watch.cpu_share)


# -- phases ---------------------------------------------------------------------------------------------------------
def grid_order() -> list[Config]:
    """Every config once, alternating sides so that no side always runs after the other."""
    hf = list(dict.fromkeys([hf for _, hf, _ in EQUAL] + HF_GRID))
    st = list(dict.fromkeys([st for _, _, st in EQUAL] + ST_GRID))
    out: list[Config] = []
    for i in range(max(len(hf), len(st))):
        out += ([hf[i]] if i < len(hf) else []) + ([st[i]] if i < len(st) else [])
    return out


def ranked(samples: dict[Config, list[Sample]], which: str, int8: bool | None = None) -> list[Config]:
    """``which`` side's configs, fastest first; with ``int8`` given, among configs that leave the draft alone or
    draft with that copy of it. After the repeated passes only the configs measured in all of them count: a grid
    config's single pass could win by the host's noise alone."""
    mine = {c: s for c, s in samples.items() if side(c) == which
            and (int8 is None or not isinstance(c, StConfig) or c.spec.method != "draft" or c.int8 == int8)}
    runs = max(len(s) for s in mine.values())
    return sorted((c for c in mine if len(mine[c]) == runs),
                  key=lambda c: -Spread.of([x.tokens_per_s for x in mine[c]]).median)


def best(samples: dict[Config, list[Sample]], which: str, int8: bool | None = None) -> Config:
    return ranked(samples, which, int8)[0]


def single_requests(bench: Bench, prompts: dict[str, Prompt], reps: int, log,
                    names: tuple[str, ...] = PROMPTS) -> dict[str, dict[Config, list[Sample]]]:
    samples: dict[str, dict[Config, list[Sample]]] = {p: {} for p in names}
    order = grid_order()
    for _, (name, cfg) in interleaved([(p, c) for p in names for c in order], 1):
        samples[name].setdefault(cfg, []).append(s := bench.run(cfg, prompts[name].ids))
        log(f"grid     {name:<9} {side(cfg):<12} {label(cfg):<26} {s.tokens_per_s:6.2f} tok/s cpu {s.cpu_share:.2f}")
    # each side's two fastest in the grid: one pass each, so the runner-up is often the better config
    compared = {p: list(dict.fromkeys([c for _, hf, st in EQUAL for c in (hf, st)]
                                      + ranked(samples[p], HF)[:2] + ranked(samples[p], ST)[:2])) for p in names}
    for rep, name in interleaved(list(names), reps - 1):
        configs = compared[name]
        shift = (rep + 1) % len(configs)
        for cfg in configs[shift:] + configs[:shift]:
            samples[name][cfg].append(s := bench.run(cfg, prompts[name].ids))
            log(f"rep {rep + 2}    {name:<9} {side(cfg):<12} {label(cfg):<26} {s.tokens_per_s:6.2f} tok/s "
                f"cpu {s.cpu_share:.2f}")
    return samples


def global_best(samples: dict[str, dict[Config, list[Sample]]]) -> StConfig:
    """The spectune config with the best geometric-mean speedup over spectune off across the prompts."""
    def speedup(cfg: StConfig) -> float:
        return geomean([Spread.of([s.tokens_per_s for s in samples[p][cfg]]).median
                        / Spread.of([s.tokens_per_s for s in samples[p][ST_OFF]]).median for p in PROMPTS])
    return max((c for c in samples[PROMPTS[0]] if side(c) == ST and c.spec.speculative), key=speedup)


def concurrent(bench: Bench, prompts: dict[str, Prompt], samples, reps: int, log) -> dict[str, object]:
    best_hf = {p: best(samples[p], HF) for p in PROMPTS}
    # one engine holds one copy of the draft: the best per prompt among configs using the copy most prompts prefer
    copies = [c.int8 for c in (best(samples[p], ST) for p in PROMPTS) if c.spec.method == "draft"]
    copy = copies.count(True) >= copies.count(False) if copies else False
    best_st = {p: best(samples[p], ST, copy) for p in PROMPTS}
    family = {name: "humaneval" if name.startswith("humaneval") else name for name in CONCURRENT}
    ids = [prompts[name].ids for name in CONCURRENT]
    glob = global_best(samples)
    runs = {
        "transformers one after another (best per prompt)": ("hf", [best_hf[family[n]] for n in CONCURRENT]),
        f"spectune batched, {glob.label()} for all": ("st", [glob] * len(CONCURRENT)),
        "spectune batched, best per prompt": ("st", [best_st[family[n]] for n in CONCURRENT]),
        "spectune batched, off": ("st", [ST_OFF] * len(CONCURRENT)),
    }
    results: dict[str, list[Sample]] = {name: [] for name in runs}
    for rep, name in interleaved(list(runs), reps):
        kind, configs = runs[name]
        if kind == "hf":
            parts = [bench.hf(cfg, p) for cfg, p in zip(configs, ids)]
            seconds = sum(x.seconds for x in parts)
            total = sum(x.new_tokens for x in parts)
            share = sum(x.cpu_share * x.seconds for x in parts) / seconds
            s = Sample(total / seconds, seconds, total, sum(x.target_forwards for x in parts),
                       sum(x.draft_forwards for x in parts), 0.0, [x.outputs[0] for x in parts], share)
        else:
            s = bench.spectune(configs, ids)
        results[name].append(s)
        log(f"conc {rep + 1}   {name:<52} {s.tokens_per_s:6.2f} tok/s cpu {s.cpu_share:.2f}")
    return {"runs": runs, "results": results}


@torch.inference_mode()
def cost_curve(target: LoadedModel, draft: LoadedModel, draft_int8: LoadedModel, context: list[int], reps: int,
               log) -> list[dict]:
    """Forward + logits for every fed token at a ``len(context)``-token cache: spectune's BatchKV path (mask building
    included) and a plain transformers forward on a DynamicCache, both timed per call."""
    points = ([("target", 1, t) for t in (1, 2, 4, 8, 16)] + [("target", b, 1) for b in (2, 4, 8)]
              + [("draft", 1, 1), ("draft int8", 1, 1)])
    loaded = {"target": target, "draft": draft, "draft int8": draft_int8}
    models = {name: m.model for name, m in loaded.items()}
    prefix = context[:-1]
    kvs: dict[tuple[str, int], BatchKV] = {}
    caches: dict[tuple[str, int], DynamicCache] = {}
    for name, model in models.items():
        one = BatchKV(model, decoder=loaded[name].decoder)
        one.prefill([prefix])
        dyn = DynamicCache()
        model(input_ids=torch.tensor([prefix], device=one.device), cache=dyn, use_cache=True)
        for b in sorted({b for n, b, _ in points if n == name}):
            kv = BatchKV(model, 0, one.decoder)
            for _ in range(b):
                kv.extend(one)
            kvs[(name, b)] = kv
            caches[(name, b)] = DynamicCache(ddp_cache_data=[(x.keys.repeat(b, 1, 1, 1), x.values.repeat(b, 1, 1, 1))
                                                             for x in dyn.layers])
    times: dict[tuple[str, int, int], dict[str, list[float]]] = {p: {"spectune": [], "hf": []} for p in points}
    for rep, (name, b, t) in interleaved(points, reps + 1):
        tokens = [context[-1:] * t] * b
        kv, cache, model = kvs[(name, b)], caches[(name, b)], models[name]
        for path in (("spectune", "hf") if rep % 2 else ("hf", "spectune")):
            start = time.perf_counter()
            if path == "spectune":
                kv.logits(kv.forward(Nodes.chains(tokens, 0, kv.device)))
            else:
                model(input_ids=torch.tensor(tokens, device=kv.device), cache=cache, use_cache=True)
            ms = 1000 * (time.perf_counter() - start)
            if rep:  # the first pass warms kernels up
                times[(name, b, t)][path].append(ms)
        kv.commit([[] for _ in range(b)])
        cache.crop(-t)
    rows = []
    for (name, b, t), ms in times.items():
        rows.append({"model": name, "batch": b, "tokens": t, "spectune_ms": asdict(Spread.of(ms["spectune"])),
                     "hf_ms": asdict(Spread.of(ms["hf"]))})
        log(f"cost     {name:<6} batch {b} tokens {t:>2}: spectune {Spread.of(ms['spectune']).fmt(1)} ms, "
            f"transformers {Spread.of(ms['hf']).fmt(1)} ms")
    return rows


# -- report ---------------------------------------------------------------------------------------------------------
def tps(samples: list[Sample]) -> Spread:
    return Spread.of([s.tokens_per_s for s in samples])


def ratio(st: list[Sample], hf: list[Sample]) -> str:
    """Ratio of medians, with the range of the per-pass ratios (both sides ran in the same passes)."""
    mid = tps(st).median / tps(hf).median
    per_pass = [a.tokens_per_s / b.tokens_per_s for a, b in zip(st, hf)]
    if len(per_pass) < 2:
        return f"{mid:.2f}x"
    return f"{mid:.2f}x ({min(per_pass):.2f}-{max(per_pass):.2f})"


def match(samples: list[Sample], refs: list[list[int]], names: tuple[str, ...] = ()) -> str:
    """``yes`` when every output equals transformers' target-alone greedy output, else where it first differs
    (per request for a batch); ``(varies)`` when the passes disagree."""
    diffs = {tuple(first_diff(o, r) for o, r in zip(s.outputs, refs)) for s in samples}
    worst = [min(d[i] for d in diffs if d[i] is not None) if any(d[i] is not None for d in diffs) else None
             for i in range(len(refs))]
    if all(d is None for d in worst):
        text = "yes"
    elif names:
        text = "no: " + ", ".join(f"{n} @{d}" for n, d in zip(names, worst) if d is not None)
    else:
        text = f"no @{worst[0]}"
    return text + (" (varies)" if len(diffs) > 1 else "")


def counts(samples: list[Sample], field: str) -> str:
    values = sorted({getattr(s, field) for s in samples})
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def prompt_table(name: str, prompt: Prompt, samples: dict[Config, list[Sample]]) -> list[str]:
    ref = [samples[HfConfig("alone")][0].outputs[0]]
    what = {"humaneval": f"{HUMANEVAL_MAIN}, raw completion", "edit": "rename a variable in a 41-line file, chat",
            "prose": "open question, chat"}[name]
    lines = [f"### {name}: {what}, {len(prompt.ids)} prompt tokens", "",
             "| comparison | transformers | tok/s | spectune | tok/s | spectune/transformers | MAL tf / st "
             "| target fwd tf / st | draft fwd tf / st | same as tf target alone: tf / st |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    pairs = [(f"equal: {title}", hf, st) for title, hf, st in EQUAL]
    pairs.append(("best of each grid", best(samples, HF), best(samples, ST)))
    for title, hf, st in pairs:
        a, b = samples[hf], samples[st]
        lines.append(f"| {title} | {label(hf)} | {tps(a).fmt()} | {label(st)} | {tps(b).fmt()} | {ratio(b, a)} "
                     f"| {a[0].mean_acceptance_length:.2f} / {b[0].mean_acceptance_length:.2f} "
                     f"| {counts(a, 'target_forwards')} / {counts(b, 'target_forwards')} "
                     f"| {counts(a, 'draft_forwards')} / {counts(b, 'draft_forwards')} "
                     f"| {match(a, ref)} / {match(b, ref)} |")
    lines += ["", f"Grid for {name} (runs = timed passes; tok/s = median (min-max)):", "",
              "| side | config | runs | tok/s | ms per target fwd | CPU share | MAL | target fwd | draft fwd "
              "| new tokens | same as tf target alone |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cfg in sorted(samples, key=lambda c: (side(c), -tps(samples[c]).median)):
        s = samples[cfg]
        per_fwd = Spread.of([1000 * x.seconds / x.target_forwards for x in s]).median
        share = Spread.of([x.cpu_share for x in s]).fmt()
        lines.append(f"| {side(cfg)} | {label(cfg)} | {len(s)} | {tps(s).fmt()} | {per_fwd:.0f} | {share} "
                     f"| {s[0].mean_acceptance_length:.2f} "
                     f"| {counts(s, 'target_forwards')} | {counts(s, 'draft_forwards')} | {counts(s, 'new_tokens')} "
                     f"| {match(s, ref)} |")
    return lines + [""]


def concurrent_table(conc: dict, refs: list[list[int]]) -> list[str]:
    runs, results = conc["runs"], conc["results"]
    base = next(name for name in runs if runs[name][0] == "hf")
    lines = [f"### {len(CONCURRENT)} concurrent requests ({', '.join(CONCURRENT)})", "",
             "| run | configs | total tokens | wall s | tok/s | vs transformers one after another "
             "| target fwd | same as tf target alone |", "|---|---|---|---|---|---|---|---|"]
    for name, (_, configs) in runs.items():
        s = results[name]
        cfgs = ", ".join(dict.fromkeys(label(c) for c in configs))
        lines.append(f"| {name} | {cfgs} | {counts(s, 'new_tokens')} | {Spread.of([x.seconds for x in s]).fmt(1)} "
                     f"| {tps(s).fmt()} | {ratio(s, results[base])} | {counts(s, 'target_forwards')} "
                     f"| {match(s, refs, CONCURRENT)} |")
    return lines + [""]


def cost_table(rows: list[dict], context: int) -> list[str]:
    def ms(row: dict, path: str) -> float:
        return row[f"{path}_ms"]["median"]

    unit = {r["model"]: r for r in rows if r["batch"] == 1 and r["tokens"] == 1}
    lines = [f"### Forward cost at a {context}-token context (ms per forward + logits of every fed token)", "",
             "| model | batch | tokens fed | spectune BatchKV ms | x 1 token | transformers DynamicCache ms "
             "| x 1 token |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        one = unit[r["model"]]
        st, hf = Spread(**r["spectune_ms"]), Spread(**r["hf_ms"])
        lines.append(f"| {r['model']} | {r['batch']} | {r['tokens']} | {st.fmt(1)} "
                     f"| {st.median / ms(one, 'spectune'):.2f} | {hf.fmt(1)} | {hf.median / ms(one, 'hf'):.2f} |")
    ratios = []
    for draft in (d for d in ("draft", "draft int8") if d in unit):
        ratio_st = ms(unit[draft], "spectune") / ms(unit["target"], "spectune")
        ratio_hf = ms(unit[draft], "hf") / ms(unit["target"], "hf")
        ratios.append(f"{draft} {ratio_st:.2f} (spectune path), {ratio_hf:.2f} (transformers forward)")
    return lines + ["", f"Draft/target single-token cost ratio: {'; '.join(ratios)}.", ""]


def targets(samples, conc) -> list[str]:
    lines = ["### Targets", ""]
    for name in samples:
        s = samples[name]
        eq = ", ".join(f"{title} {tps(s[st]).median / tps(s[hf]).median:.2f}x" for title, hf, st in EQUAL)
        b = tps(s[best(s, ST)]).median / tps(s[best(s, HF)]).median
        lines.append(f"- {name}: equal settings (>= 1.0x): {eq}; best vs best (>= 1.2x): {b:.2f}x "
                     f"({'met' if b >= 1.2 else 'missed'})")
    if conc is None:
        return lines + [""]
    results = conc["results"]
    base = tps(next(results[n] for n, (kind, _) in conc["runs"].items() if kind == "hf")).median
    batched = {n: tps(results[n]).median / base for n, (kind, _) in conc["runs"].items() if kind == "st"}
    top = max(batched, key=batched.__getitem__)
    short = {n: n.removeprefix("spectune batched, ") for n in batched}
    each = ", ".join(f"{short[n]} {r:.2f}x" for n, r in batched.items())
    lines.append(f"- 4 concurrent (>= 2x): spectune batched, best config for the batch ({short[top]}): "
                 f"{batched[top]:.2f}x ({'met' if batched[top] >= 2 else 'missed'}); each: {each}")
    return lines + [""]


def sample_json(s: Sample, references: list[list[int]]) -> dict:
    out = asdict(s)
    out["first_diff_vs_tf_target_alone"] = [first_diff(o, r) for o, r in zip(s.outputs, references)]
    return out


def single_json(samples) -> dict:
    return {p: [{"side": side(c), "config": label(c),
                 "samples": [sample_json(x, [by_config[HfConfig("alone")][0].outputs[0]]) for x in s]}
                for c, s in by_config.items()] for p, by_config in samples.items()}


def to_json(meta, samples, conc, cost, refs) -> dict:
    single = single_json(samples)
    concurrent_out = {n: {"configs": [label(c) for c in conc["runs"][n][1]],
                          "samples": [sample_json(x, refs) for x in conc["results"][n]]} for n in conc["runs"]}
    return {"meta": meta, "single": single, "concurrent": concurrent_out, "cost_curve": cost, "references": refs}


# -- main -----------------------------------------------------------------------------------------------------------
def warm_up(bench: Bench, prompts: dict[str, Prompt]) -> None:
    """One short run of every code path, so first-call kernel setup is not timed."""
    ids = prompts["edit"].ids
    for cfg in [HfConfig("alone"), HfConfig("assisted", 4), HfConfig("assisted", 4, int8=True), HfConfig("lookup", 4),
                ST_OFF, *(st for _, _, st in EQUAL), ST_GRID[3]]:
        bench.run(cfg, ids, max_new_tokens=8)


def from_json(data: dict) -> tuple[dict, dict, dict, list]:
    """``to_json``'s output back into (samples, concurrent runs, cost curve, references), for ``--render``."""
    configs = {label(c): c for c in [*HF_GRID, *ST_GRID, *(c for _, hf, st in EQUAL for c in (hf, st))]}

    def sample(raw: dict) -> Sample:
        return Sample(**{k: v for k, v in raw.items() if k != "first_diff_vs_tf_target_alone"})

    samples = {p: {configs[e["config"]]: [sample(x) for x in e["samples"]] for e in entries}
               for p, entries in data["single"].items()}
    runs = {n: ("hf" if n.startswith(HF) else "st", [configs[c] for c in e["configs"]])
            for n, e in data["concurrent"].items()}
    conc = {"runs": runs, "results": {n: [sample(x) for x in e["samples"]] for n, e in data["concurrent"].items()}}
    return samples, conc, data["cost_curve"], data["references"]


def report_head(meta: dict) -> list[str]:
    return [f"## spectune vs transformers: {meta['target']} target, {meta['draft']} draft (and its int8 copy)", "",
            f"`{meta['command']}`: greedy, max_new_tokens {meta['max_new_tokens']}, torch threads {meta['threads']}, "
            f"{meta['reps']} timed passes of the compared configs (grid: 1 pass), torch {meta['torch']}, "
            f"transformers {meta['transformers']}, on {meta.get('hardware', 'a CPU the run did not record')}. "
            f"Load average (1/5/15 min) at start "
            f"{'/'.join(f'{x:.1f}' for x in meta['load_avg_start'])}, at end "
            f"{'/'.join(f'{x:.1f}' for x in meta['load_avg_end'])}; wall {meta['wall_s']:.0f} s. "
            "tok/s = new tokens / wall time of the whole call (prefill included), median (min-max); "
            "MAL = mean acceptance length (1 + accepted / drafting steps; transformers' derived from its forward "
            "calls); fwd = forward calls of the decoder stack incl. prefill.", ""]


def report(meta: dict, prompts: dict[str, Prompt], samples, conc, cost, refs, context: int) -> str:
    body = report_head(meta) + targets(samples, conc)
    for name in PROMPTS:
        body += prompt_table(name, prompts[name], samples[name])
    body += concurrent_table(conc, refs) + cost_table(cost, context)
    return "\n".join(body)


def results_stem(args: argparse.Namespace) -> str:
    return "engine_vs_hf" + ("_quick" if args.quick else "") + (f"_{args.dtype}" if args.dtype != "bfloat16" else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smollm2-135m (bf16 target, fp32 draft), fewer tokens")
    parser.add_argument("--reps", type=int, default=2, help="timed passes of the compared configs (>= 2)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 96, or 32 with --quick")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="the target's weights (the draft stays bf16, plus its int8 copy); on a CPU without native "
                             "bf16 a bf16 verify never pays (benchmarks/dtype_cost.py). float32 writes "
                             "engine_vs_hf_float32.*")
    parser.add_argument("--context", type=int, default=300, help="cache length for the cost curve")
    parser.add_argument("--cost-reps", type=int, default=5)
    parser.add_argument("--render", type=Path, default=None, help="rewrite the .md of this results .json (no runs)")
    parser.add_argument("--only", choices=PROMPTS, default=None,
                        help="phases 1-2 for this prompt alone (more --reps for one noisy comparison); writes "
                             "engine_vs_hf_<prompt>.md")
    args = parser.parse_args()
    if args.render is not None:
        data = json.loads(args.render.read_text())
        meta = data["meta"]
        from transformers import AutoTokenizer

        prompts = build_prompts(AutoTokenizer.from_pretrained(model_dir(meta["target"].split("/")[0])))
        text = report(meta, prompts, *from_json(data), meta.get("context", args.context))
        args.render.with_suffix(".md").write_text(text + "\n")
        print(text)
        return
    if args.reps < 1:
        parser.error("--reps: must be at least 1")
    if args.quick and args.dtype != "bfloat16":
        parser.error("--dtype: --quick always runs smollm2-135m in bf16")
    max_new = args.max_new_tokens or (32 if args.quick else 96)
    pin_threads(args.threads)
    hf_logging.set_verbosity_error()
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s load {os.getloadavg()[0]:.2f}] {msg}", file=sys.stderr,
              flush=True)

    names = (("smollm2-135m", "bfloat16"), ("smollm2-135m", "float32")) if args.quick else \
        (("qwen2.5-coder-1.5b", args.dtype), ("qwen2.5-coder-0.5b", "bfloat16"))  # plus the draft's int8 copy
    meta = {"command": " ".join([".venv/bin/python", "benchmarks/engine_vs_hf.py", *sys.argv[1:]]),
            "target": "/".join(names[0]), "draft": "/".join(names[1]), "max_new_tokens": max_new,
            "reps": args.reps, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "hardware": hardware_fingerprint("cpu"),
            "load_avg_start": os.getloadavg()}
    log(f"loading {names}")
    target = load_model(names[0][0], dtype=names[0][1])
    draft = load_model(names[1][0], dtype=names[1][1])
    draft_int8 = load_model(names[1][0], dtype="int8")
    check_draft_compatible(target, draft)
    prompts = build_prompts(target.tokenizer)
    bench = Bench(target, draft, draft_int8, max_new)
    warm_up(bench, prompts)
    log("grid")
    if args.only is not None:
        samples = single_requests(bench, prompts, args.reps, log, (args.only,))
        meta.update(load_avg_end=os.getloadavg(), wall_s=round(time.perf_counter() - started, 1))
        text = "\n".join(report_head(meta) + targets(samples, None)
                          + prompt_table(args.only, prompts[args.only], samples[args.only]))
        print(text)
        stem = f"{results_stem(args)}_{args.only}"
        (RESULTS / f"{stem}.md").write_text(text + "\n")
        (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "single": single_json(samples)}, indent=1))
        return
    samples = single_requests(bench, prompts, args.reps, log)
    refs = [samples[p][HfConfig("alone")][0].outputs[0] if p in samples else
            bench.hf(HfConfig("alone"), prompts[p].ids).outputs[0] for p in CONCURRENT]
    meta["load_avg_after_single"] = os.getloadavg()
    conc = concurrent(bench, prompts, samples, args.reps, log)
    context = (prompts["edit"].ids * (1 + args.context // len(prompts["edit"].ids)))[:args.context + 1]
    cost = cost_curve(target, draft, draft_int8, context, args.cost_reps, log)
    meta["load_avg_end"] = os.getloadavg()
    meta["context"] = args.context
    meta["wall_s"] = round(time.perf_counter() - started, 1)

    stem = results_stem(args)
    RESULTS.mkdir(exist_ok=True)
    # the measurements first: a report that fails can be rendered again from them (--render)
    (RESULTS / f"{stem}.json").write_text(json.dumps(to_json(meta, samples, conc, cost, refs), indent=1))
    text = report(meta, prompts, samples, conc, cost, refs, args.context)
    print(text)
    (RESULTS / f"{stem}.md").write_text(text + "\n")
    log(f"wrote {RESULTS / stem}.md and .json")


if __name__ == "__main__":
    main()
