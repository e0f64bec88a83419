"""A sweep directory's config.json: what was timed (compared on every resume) and where and with what.

{"models": {"target": ModelOptions, "drafter": ModelOptions | null}, "pool": PoolConfig,
 "sweep": SweepOptions (flat), "prompt_set": {"count", "digest"}, "identity": both models' weights,
 "starts": [one environment per start of any shard (evaluation.provenance)]}

Resuming, or adding a shard, into a directory whose models, pool or sweep grid differ is refused with the
differences named: records made under different settings must never be pooled."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from evaluation import provenance
from evaluation.prompts import Prompt
from evaluation.run_identity import SHARD_SETTINGS, START_SETTINGS
from models.options import ModelOptions
from pipeline.config import InputError, PoolConfig
from pipeline.settings import DecodeConfig
from programs.cli import option_values
from programs.options import PromptOptions
from timing.options import SWEEP_DECODE, SweepOptions
from timing.record_store import read_records, shard_files

log = logging.getLogger("timing")

CONFIG = "config.json"
# Sweep fields that change where or how patiently a run works, not what it times, and a model field that times
# the CPU kernels again at a start (what they are is the start's): the same a rounds file's run id leaves out.
_NOT_COMPARED = (*SHARD_SETTINGS, "speed_tokens")  # how a sweep counts its speeds: the records keep both counts
_MODEL_NOT_COMPARED = START_SETTINGS
# Sweep settings at their defaults, for a config.json written before one existed
_SWEEP_DEFAULTS = {"stratify": PromptOptions().stratify, "greedy_repeats": 1,
                   **{name: getattr(DecodeConfig(), name) for name in SWEEP_DECODE}}


class ConfigMismatch(InputError):
    """The directory holds records of other models, pool or sweep settings."""


def describe(target: ModelOptions, drafter: ModelOptions | None, pool: PoolConfig, sweep: SweepOptions,
             prompts: Sequence[Prompt] = ()) -> dict:
    """The config.json content without its starts; `prompts` are the sweep's prompts (all shards)."""
    digest = hashlib.blake2b(json.dumps([[p.id, p.category, list(p.turns)] for p in prompts]).encode(),
                             digest_size=8)
    return {"models": {"target": dataclasses.asdict(target),
                       "drafter": dataclasses.asdict(drafter) if drafter else None},
            "pool": dataclasses.asdict(pool), "sweep": _plain(option_values(sweep)),
            "prompt_set": {"count": len(prompts), "digest": digest.hexdigest()}}


def compared(config: dict) -> dict:
    """The part of a config that must match for records to be pooled: models, pool, grid, shard count and
    the prompts themselves (a source file edited in place changes them under the same name)."""
    sweep = {k: v for k, v in {**_SWEEP_DEFAULTS, **config["sweep"]}.items()  # fields added later take
             if k not in _NOT_COMPARED}                                       # their defaults
    sweep["n_shards"] = config["sweep"]["shard"].partition("/")[2].strip()  # shards of one N may share it
    models = {role: None if m is None else {k: v for k, v in {**dataclasses.asdict(ModelOptions()), **m}.items()
                                            if k not in _MODEL_NOT_COMPARED}  # fields added later: defaults
              for role, m in config["models"].items()}
    return {"models": models, "pool": config["pool"], "sweep": sweep, "prompt_set": config.get("prompt_set")}


def differences(old: dict, new: dict, path: str = "") -> list[str]:
    """Dotted paths where two compared configs differ, each with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in dict.fromkeys([*old, *new])
                for d in differences(old.get(k), new.get(k), f"{path}.{k}" if path else k)]
    return [] if old == new else [f"{path}: {old!r} here, {new!r} now"]


def environment(shard: str, drafter_env: dict | None) -> dict:
    """Where and with what this start runs (evaluation.provenance), its shard and its GPUs' pinning."""
    return {"id": uuid.uuid4().hex, "shard": shard, **provenance.environment(),
            "cuda_visible_devices": {"target": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                     "drafter": (drafter_env or {}).get("CUDA_VISIBLE_DEVICES")}}


NOT_IDENTITY = ("linear_kernels",)  # what a start chose at load (timed): kept with the start, not compared


def note_identity(directory: str | Path, start_id: str, models: dict) -> None:
    """Record what both models' weights are (revision, dtype, device) once the session is open; a sweep whose weights
    changed under the same model names since its first start is refused (ConfigMismatch). The CPU linear kernels each
    start chose go with that start: they are timed at load, so they may differ between starts of the same weights."""
    chosen = {role: {k: m[k] for k in NOT_IDENTITY if k in m} for role, m in models.items() if m}
    models = {role: m if m is None else {k: v for k, v in m.items() if k not in NOT_IDENTITY}
              for role, m in models.items()}
    with _locked(directory) as (path, config):
        old = config.get("identity")
        if old is not None:
            diff = differences(old, models)
            if diff:
                raise ConfigMismatch(f"{directory}: the models' weights differ from those its records were made "
                                     f"with; use another `out`. Differences:\n  " + "\n  ".join(diff))
        config["identity"] = models
        for start in config.get("starts", []):
            if start.get("id") == start_id:
                start["identity_checked"] = True
                start.update({"models_at_load": chosen} if any(chosen.values()) else {})
        _write(path, config)


def read_config(directory: str | Path) -> dict:
    """A run directory's config.json; InputError naming the directory when it is none, or the file when it
    is missing or not JSON."""
    if not Path(directory).is_dir():
        raise InputError(f"the run directory {directory} " + ("is not a directory" if Path(directory).exists()
                                                              else "does not exist"))
    path = Path(directory) / CONFIG
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{directory}: no {CONFIG}; is it a sweep's output directory?") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e.msg})") from None


def claim(directory: str | Path, config: dict, start: dict) -> dict:
    """Create `directory` and its config.json, or check that its config matches; record this start. Raises
    ConfigMismatch naming every difference. A directory whose sweep recorded no decode yet (one refused before its first
    record, say) takes the new settings. Shards starting together in one directory take turns through a lock file."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    with _locked(directory) as (path, old):
        if old:
            diff = differences(compared(old), compared(config))
            if diff and any(read_records(p) for p in shard_files(directory)):
                raise ConfigMismatch(f"{directory} holds a sweep with other settings; use another `out`, or "
                                     f"rerun with the same settings to resume. Differences:\n  "
                                     + "\n  ".join(diff))
            if diff:
                log.info("%s recorded no decode under its old settings; it takes the new ones", directory)
                old = {**config, "starts": []}
            config = {**old, "starts": old.get("starts", []) + [start]}
        else:
            config = {**config, "starts": [start]}
        _write(path, config)
    return config


@contextmanager
def _locked(directory: str | Path) -> Iterator[tuple[Path, dict]]:
    """(config.json's path, its content or {}) while holding the directory's config lock."""
    with open(Path(directory) / ".config.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = Path(directory) / CONFIG
        yield path, read_config(directory) if path.exists() else {}


def _write(path: Path, config: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the old or the new file, never half of one


def _plain(value):
    return json.loads(json.dumps(value))
