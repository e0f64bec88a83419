"""Which run a rounds chunk belongs to, and what that run's decodes could hold (DESIGN.md section 8).

A run's identity is a digest of its provenance without what differs between its shards and starts, with what
every decode of the run must agree with: the pool's shape, the target's vocabulary, the temperatures and the
largest tree budget. A file written before schema 3 carries none: its identity is derived from its provenance
(no vocabulary). A part the provenance does not say is None and not checked."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

import numpy as np

from evaluation.rounds import RecordedDecode, RecordedRound
from pipeline.config import is_int

# A sweep's settings that change where or how patiently a shard works, not what it records (timing.run_config
# compares the rest on every resume), and a model's settings that each start chooses again.
SHARD_SETTINGS = ("out", "shard", "drafter_timeout", "ready_timeout", "connect_timeout", "prompt")
START_SETTINGS = ("retune", "retime")
ENTROPY_SLACK = 1e-3  # an entropy summed in float64 and stored in float32


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """A run's id and the bounds of what its decodes may hold (None: not known, not checked)."""

    id: str
    pool: tuple[int, int, int] | None = None  # topk, depth, expand
    vocab: int | None = None  # tokens are ids in [0, vocab)
    temperatures: tuple[float, ...] | None = None
    budget: int | None = None  # the largest tree budget of any round (budget_max, the budgets, the overrides)

    def __post_init__(self) -> None:
        if not (isinstance(self.id, str) and 0 < len(self.id) <= 64):
            raise ValueError(f"run field `id` is {self.id!r}, not a run id")
        if self.pool is not None and not (len(self.pool) == 3 and all(is_int(v) and 0 < v < 1 << 20
                                                                      for v in self.pool)):
            raise ValueError(f"run field `pool` is {self.pool!r}, not (topk, depth, expand)")
        if self.vocab is not None and not (is_int(self.vocab) and 0 < self.vocab < 1 << 31):
            raise ValueError(f"run field `vocab` is {self.vocab!r}, not a vocabulary size")
        if self.temperatures is not None and not (
                0 < len(self.temperatures) <= 1024
                and all(isinstance(t, float) and math.isfinite(t) and t >= 0 for t in self.temperatures)):
            raise ValueError(f"run field `temperatures` is {self.temperatures!r}, not a list of temperatures")
        if self.budget is not None and not (is_int(self.budget) and 0 < self.budget < 1 << 31):
            raise ValueError(f"run field `budget` is {self.budget!r}, not a tree budget")

    def as_dict(self) -> dict:
        """The map a chunk carries (lists for tuples)."""
        return {name: list(v) if isinstance(v, tuple) else v for name, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, value) -> RunIdentity:
        """A chunk's `run` map; ValueError naming the field at fault."""
        if not isinstance(value, dict) or set(value) - {"id", "pool", "vocab", "temperatures", "budget"}:
            raise ValueError("its `run` is not a run identity")
        pool, temps = value.get("pool"), value.get("temperatures")
        if temps is not None and isinstance(temps, list):
            temps = tuple(float(t) if is_int(t) else t for t in temps)
        return cls(value.get("id"), tuple(pool) if isinstance(pool, list) else pool, value.get("vocab"),
                   temps, value.get("budget"))

    def problem(self, decode: RecordedDecode) -> str | None:
        """What in `decode` this run could not have recorded, in words; None when nothing."""
        key = decode.key
        if self.temperatures is not None and float(key["temperature"]) not in self.temperatures:
            return (f"temperature {key['temperature']!r} is none the run decoded at "
                    f"({', '.join(f'{t:g}' for t in self.temperatures)})")
        for name in ("budget", "grid_budget"):
            if self.budget is not None and is_int(key.get(name)) and key[name] > self.budget:
                return f"key field `{name}` {key[name]} exceeds the run's largest budget {self.budget}"
        for i, r in enumerate(decode.rounds):
            if found := self._round_problem(r):
                return f"round {i}: {found}"
        return None

    def _round_problem(self, r: RecordedRound) -> str | None:
        if self.budget is not None and r.budget > self.budget:
            return f"a budget of {r.budget}, beyond the run's largest ({self.budget})"
        if self.vocab is not None:
            tokens = {"pool token": r.pool.token, "emitted token": r.emitted,
                      "root token": np.array([r.root, r.root_argmax])}
            for what, t in tokens.items():
                if len(t) and int(t.max()) >= self.vocab:
                    return f"{what} {int(t.max())}, outside the run's vocabulary [0, {self.vocab})"
            if r.root_entropy > math.log(self.vocab) + ENTROPY_SLACK:  # a row over V tokens: at most log V
                return (f"`root_entropy` {r.root_entropy:.6g}, beyond log {self.vocab} = {math.log(self.vocab):.6g}, "
                        f"the most a row over the run's vocabulary can hold")
        if self.pool is not None:
            topk, depth, expand = self.pool
            children = np.bincount(r.pool.parent + 1)
            if int(children.max()) > topk:
                return f"a node with {int(children.max())} children in a pool of topk {topk}"
            if int(r.pool.depth.max()) > depth:
                return f"a candidate at depth {int(r.pool.depth.max())} in a pool of depth {depth}"
            per_level = np.bincount(r.pool.depth[r.pool.expanded])
            if len(per_level) and int(per_level.max()) > expand:
                return f"{int(per_level.max())} nodes expanded on one level in a pool of expand {expand}"
        return None


def run_identity(provenance: dict, vocab: int | None = None) -> RunIdentity:
    """The identity of the run `provenance` describes (a sweep's config, or a decode run's header)."""
    return RunIdentity(run_id(provenance), _pool(provenance.get("pool")), vocab, _temperatures(provenance),
                       _budget(provenance))


def run_id(provenance: dict) -> str:
    """A digest of the provenance without what differs between the shards and starts of one run."""
    text = json.dumps(_of_the_run(provenance), sort_keys=True, default=repr)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _of_the_run(provenance: dict) -> dict:
    """The provenance without what differs between the shards and starts of one run."""
    kept = dict(provenance)
    if isinstance(kept.get("sweep"), dict):
        kept["sweep"] = {k: v for k, v in kept["sweep"].items() if k not in SHARD_SETTINGS}
    if isinstance(kept.get("models"), dict):
        kept["models"] = {role: {k: v for k, v in m.items() if k not in START_SETTINGS} if isinstance(m, dict)
                          else m for role, m in kept["models"].items()}
    return kept


def _settings(provenance: dict) -> dict:
    """A sweep's settings, or a decode run's (both flat maps of option values)."""
    return next((provenance[name] for name in ("sweep", "settings") if isinstance(provenance.get(name), dict)), {})


def _pool(pool) -> tuple[int, int, int] | None:
    if isinstance(pool, dict) and all(is_int(pool.get(k)) and pool[k] > 0 for k in ("topk", "depth", "expand")):
        return pool["topk"], pool["depth"], pool["expand"]
    return None


def _temperatures(provenance: dict) -> tuple[float, ...] | None:
    """A sweep's `temperatures` (comma-separated) or a decode run's `temperature`; None when neither reads."""
    s = _settings(provenance)
    value = s.get("temperatures", s.get("temperature"))
    try:
        found = [float(t) for t in value.split(",") if t.strip()] if isinstance(value, str) else [float(value)]
    except (TypeError, ValueError):
        return None
    return tuple(found) if found and all(math.isfinite(t) and t >= 0 for t in found) else None


def _budget(provenance: dict) -> int | None:
    """The largest tree budget a round of the run could have: `budget_max` (auto), each fixed budget and each
    override's cap; None when the settings do not say."""
    s = _settings(provenance)
    parts = [s.get("budget_max")]
    budgets = s.get("budgets", s.get("budget"))
    parts += [b.strip() for b in budgets.split(",")] if isinstance(budgets, str) else [budgets]
    parts += [item.rpartition("=")[2].strip() for item in str(s.get("budget_overrides") or "").split(",")
              if "=" in item]
    numbers = [int(p) for p in parts if is_int(p) or (isinstance(p, str) and p.isdigit())]
    if s.get("budget_max") is None or not numbers:
        return None
    return max(numbers)


def differences(first: dict, other: dict) -> list[str]:
    """Dotted paths where two runs' provenances differ, each with both values (shortened)."""
    return _differences(_of_the_run(first), _of_the_run(other), "")


def _differences(old, new, path: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in dict.fromkeys([*old, *new])
                for d in _differences(old.get(k), new.get(k), f"{path}.{k}" if path else k)]
    return [] if old == new else [f"{path} {_short(old)} there, {_short(new)} here"]


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

