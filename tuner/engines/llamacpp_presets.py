"""Active llama.cpp profiles -> a ``llama-server --models-preset`` router file: one preset per workload.

Format of the llama.cpp version spectune builds (commit 0c1e570, ``common/preset.cpp``): an INI file with
``version = 1``, a ``[*]`` section of settings shared by every preset, and one section per preset whose keys are
``llama-server`` argument names without the leading dashes; unknown keys make the server refuse the file. A request's
``model`` field picks the preset, so ``"model": "<workload>"`` is served with that workload's tuned speculation.
The router starts one child ``llama-server`` per preset on demand, each with its own copy of the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from storage.identity import EngineIdentity
from storage.profiles import list_active, resolve
from tuner.engines.base import UnsupportedConfigError
from tuner.engines.llamacpp_config import LlamaCppExtension, spec_flags

PRESET_VERSION = 1
_LONG_NAMES = {"-md": "spec-draft-model"}  # short flags spec_flags emits -> the argument's long name


@dataclass(frozen=True)
class Preset:
    workload: str
    version: int  # the profile version it came from
    label: str
    options: tuple[tuple[str, str], ...]  # (argument name without dashes, value)


@dataclass(frozen=True)
class PresetFile:
    presets: tuple[Preset, ...]
    skipped: tuple[str, ...]  # "workload: why" for active profiles that llama-server cannot run

    def render(self, model: Path, *, threads: int = 2, ctx_size: int = 4096) -> str:
        lines = ["; llama-server router presets written by `spectune profiles export --format llamacpp-presets`.",
                 "; Send a request with \"model\": \"<workload>\" to get that workload's tuned speculation.",
                 f"version = {PRESET_VERSION}", "", "[*]", f"threads = {threads}",
                 f"threads-batch = {threads}", f"ctx-size = {ctx_size}", "parallel = 1", "jinja = true", ""]
        for preset in self.presets:
            lines += [f"; {preset.workload}: profile v{preset.version}, {preset.label}", f"[{preset.workload}]",
                      f"model = {model}", *(f"{key} = {value}" for key, value in preset.options), ""]
        for reason in self.skipped:
            lines.append(f"; skipped {reason}")
        return "\n".join(lines).rstrip("\n") + "\n"


def flags_to_options(flags: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["--spec-type", "ngram-mod", "-md", "x.gguf"]`` -> ``(("spec-type", "ngram-mod"), ("spec-draft-model", ...))``.

    Every speculation flag spectune emits takes exactly one value.
    """
    if len(flags) % 2:
        raise ValueError(f"flags: expected flag/value pairs, got {list(flags)}")
    options = []
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if not flag.startswith("-") or value.startswith("--"):
            raise ValueError(f"flags: {flag!r} {value!r} is not a flag/value pair")
        options.append((_LONG_NAMES.get(flag, flag.lstrip("-")), value))
    return tuple(options)


def collect_presets(session: Session, identity: EngineIdentity, draft_model: Path | None, threads: int) -> PresetFile:
    """One preset per workload whose active profile applies to ``identity`` and maps to llama-server flags."""
    presets, skipped = [], []
    for workload in sorted({record.workload for record in list_active(session)}):
        record = resolve(session, workload, identity)
        if record is None:
            continue
        if record.schedule is not None:
            skipped.append(f"{workload}: profile v{record.version} switches configs by batch size or context "
                           "length; a preset fixes one config")
            continue
        draft = str(draft_model) if draft_model is not None and record.config.method == "draft" else None
        try:
            flags = spec_flags(record.config, LlamaCppExtension.parse(record.extensions.get("llamacpp")),
                               draft_model=draft, threads=threads)
        except UnsupportedConfigError as exc:
            skipped.append(f"{workload}: profile v{record.version}: {exc}")
            continue
        spec_type = (record.extensions.get("llamacpp") or {}).get("spec_type")
        label = record.config.label() + (f" ({spec_type})" if spec_type else "")
        presets.append(Preset(workload, record.version, label, flags_to_options(flags)))
    return PresetFile(tuple(presets), tuple(skipped))


def export_presets(session: Session, out: Path, *, model: str, draft: str | None, threads: int = 2,
                   ctx_size: int = 4096) -> PresetFile:
    """Write the preset file for ``model`` (and ``draft``) to ``out``; ValueError naming the field if none applies."""
    from tuner.engines.llamacpp import resolve_gguf
    from tuner.engines.llamacpp_profiles import llamacpp_identity

    model_path = resolve_gguf(model, "--model")
    draft_path = resolve_gguf(draft, "--draft") if draft else None
    identity = llamacpp_identity(model, draft)
    presets = collect_presets(session, identity, draft_path, threads)
    if not presets.presets:
        why = "; ".join(presets.skipped) or "no active profile applies"
        raise ValueError(f"--model: no workload has a profile llama-server can run for {identity} ({why})")
    out.write_text(presets.render(model_path, threads=threads, ctx_size=ctx_size), encoding="utf-8")
    return presets
