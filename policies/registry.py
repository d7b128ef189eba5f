"""Build a policy from a SPEC string ``NAME[:key=value,...]``, e.g. ``static:method=ngram,k=4``, ``heuristic``,
``goodput:ks=1+2+4,margin=0.05`` or ``bandit:methods=ngram``.

Lists inside a value use ``+``; trees use ``x`` (``tree=2x2``). The keys ``hold`` and ``cooldown`` wrap any policy in
``Hysteresis``. Unknown names, keys or bad values raise ``ValueError`` naming the policy and key.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from policies.bandit import BanditPolicy
from policies.base import Policy
from policies.cost_model import CostModel
from policies.goodput import GoodputPolicy
from policies.heuristic import HeuristicPolicy
from policies.hysteresis import Hysteresis
from policies.static import StaticPolicy

POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in (StaticPolicy, HeuristicPolicy, GoodputPolicy,
                                                                BanditPolicy)}
WRAPPER_KEYS = ("hold", "cooldown")


@dataclass(frozen=True)
class PolicySpec:
    name: str
    options: dict[str, str]
    text: str

    @classmethod
    def parse(cls, text: str) -> PolicySpec:
        name, _, rest = text.strip().partition(":")
        name = name.strip().lower()
        if not name:
            raise ValueError(f"policy {text!r}: empty name; use NAME[:key=value,...] with NAME one of "
                             f"{', '.join(POLICIES)}")
        if name not in POLICIES:
            raise ValueError(f"policy {name!r}: unknown; choose one of {', '.join(POLICIES)}")
        options: dict[str, str] = {}
        for part in rest.split(",") if rest.strip() else []:
            key, eq, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not key or not value:
                raise ValueError(f"policy {name}: {part.strip()!r} is not key=value")
            if key in options:
                raise ValueError(f"policy {name}: key {key!r} given twice")
            options[key] = value
        return cls(name, options, text.strip())


def without_draft(spec: PolicySpec) -> PolicySpec:
    """``spec`` for a run without a draft model (n-gram traces, or a cost model calibrated without one): a policy
    whose ``methods`` or ``method`` the SPEC leaves at a default that uses the draft model gets n-gram lookups
    instead. What the SPEC names is kept, and fails where it asks for the draft model."""
    fields = POLICIES[spec.name].Options.model_fields
    changed = {}
    if "methods" in fields and "methods" not in spec.options:
        changed["methods"] = "ngram"
    if "method" in fields and "method" not in spec.options and fields["method"].default == "draft":
        changed["method"] = "ngram"
    return PolicySpec(spec.name, {**spec.options, **changed}, spec.text) if changed else spec


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors())


def build_policy(spec: str | PolicySpec, cost_model: CostModel | None = None) -> Policy:
    """A fresh policy for ``spec``; policies that price configs (``goodput``) need ``cost_model``."""
    parsed = spec if isinstance(spec, PolicySpec) else PolicySpec.parse(spec)
    cls = POLICIES[parsed.name]
    options = dict(parsed.options)
    wrapper = {key: options.pop(key) for key in WRAPPER_KEYS if key in options}
    known = set(cls.Options.model_fields)
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"policy {parsed.name}: unknown key(s) {', '.join(unknown)}; known keys: "
                         f"{', '.join(sorted(known | set(WRAPPER_KEYS)))}")
    try:
        opts = cls.Options.model_validate(options)
        if cls.needs_cost_model:
            if cost_model is None:
                raise ValueError(f"policy {parsed.name}: needs a cost model (spectune calibrate, then --cost-model)")
            policy = cls.from_options(opts, cost_model)  # type: ignore[attr-defined]
        else:
            policy = cls.from_options(opts)  # type: ignore[attr-defined]
    except ValidationError as exc:
        raise ValueError(f"policy {parsed.name}: {_describe(exc)}") from None
    if wrapper:
        try:
            hold, cooldown = int(wrapper.get("hold", 1)), int(wrapper.get("cooldown", 0))
        except ValueError:
            raise ValueError(f"policy {parsed.name}: hold and cooldown must be integers") from None
        try:
            policy = Hysteresis(policy, hold=hold, cooldown=cooldown)
        except ValueError as exc:
            raise ValueError(f"policy {parsed.name}: {exc}") from None
    return policy
