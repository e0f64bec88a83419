"""The one record of a decode, as every program writes it: the decode run's --json lines, sweep records
(which add where in the schedule the decode ran), the benchmarks, the GPU check and the Python API.

A record holds one turn of one prompt (docs/timing.md names every field). DecodeRecord is that record as a
type: programs build it by name and read it by attribute; `to_json` gives the JSON object every file holds and
`from_json` reads any schema the project has written, each in one function below, with a ValueError naming
the line and the field for anything that is not a record."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from models.kernel_cache import usable_cpus
from pipeline.result import PHASES, DecodeResult
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig

SCHEMA = 4
# Schemas still read: 3 lacks `prompt_token_ids`, `load_average` and `cpus`; 2 also `prompt`,
# `finish_reason`, `stop_reason`, `stop_strings` and `stop_token_ids` (its finish_reason derived from `stop`);
# 1, before the output limit was exact (no `schema` field), is refused.
READABLE = (2, 3, 4)


class UnreadSchema(ValueError):
    """A record of a schema this version no longer reads (or never knew)."""


def machine_load() -> float:
    """The machine's load average over the last minute (runnable and waiting tasks, this process's own among them)."""
    return round(os.getloadavg()[0], 2)


@dataclass(frozen=True, slots=True)
class SweepPlace:
    """Where in a sweep's schedule a decode ran: the grid's budget (its setting's B; summary.EVERY_BUDGET for a
    sweep's `ar`), its position in the shard's order, whether it warmed the pair up, and the shard ("I/N")."""

    grid_budget: int | str
    position: int
    warmup: bool
    shard: str


@dataclass(frozen=True, slots=True)
class BenchPlace:
    """What bench.ahead (since retired; its records are in results/) decoded a record for: its budget and
    drafting-ahead variant (both None for `ar`)."""

    budget: int | str | None
    variant: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeRecord:
    """One decode's record (the fields are docs/timing.md's). Fields a schema lacks are None in records read
    from it (`prompt`, `stop_strings` and `stop_token_ids` empty and `finish_reason` derived in schema 2), as are
    the settings and per-round columns added while a schema stood (`budgets`, `top_k`, ..., `held_rows`)."""

    prompt_id: str
    category: str
    turn: int
    decoder: str
    temperature: float
    budget: int | str
    seed: int
    max_new_tokens: int
    prompt_tokens: int
    new_tokens: int
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" or "length"
    overshoot: int
    stop: str  # pipeline.result's FINISHES
    seconds: float
    prefill_seconds: float
    tokens_per_second: float
    rounds: int
    target_passes: int
    accept_lengths: list[int]
    accepted: list[int]
    tried: list[int]
    tree_sizes: list[int]
    available: list[int]
    phases: dict[str, list[float]]  # per phase, each round's seconds
    finished: float  # Unix time
    stop_reason: str | int | None = None
    prompt: str = ""
    stop_strings: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    budgets: list[int] | None = None
    lend_cores: bool | None = None
    ahead: bool | None = None
    ahead_hits: list[int] | None = None  # per round: 1 hit, 0 missed, -1 not tried
    ahead_seconds: list[float] | None = None
    cut_pools: bool | None = None
    cut_weigh: bool | None = None
    pool_depths: list[int] | None = None
    drafter_window: int | None = None
    held_rows: list[int] | None = None
    feature_bytes: list[int] | None = None  # per round: the target's features its pool's request carried
    lookup: int | None = None  # the longest chain context lookup grafted (0: off)
    copied: list[int] | None = None  # per round: accepted tokens only the context lookup's chain proposed
    prompt_token_ids: list[int] | None = None
    load_average: list[float] | None = None  # as the decode started and as it ended
    cpus: int | None = None
    logprobs: list[list[list[float]]] | None = None  # per output token, where asked for: target_proc.logprobs'
    schema: int = SCHEMA  # the schema it was written in; to_json writes that schema's fields
    sweep: SweepPlace | None = None
    bench: BenchPlace | None = None

    def __post_init__(self) -> None:
        if self.schema not in READABLE:
            raise ValueError(f"`schema` must be one of {', '.join(map(str, READABLE))}, got {self.schema!r}")
        if self.finish_reason not in ("stop", "length"):
            raise ValueError(f"`finish_reason` must be stop or length, got {self.finish_reason!r}")
        if self.schema == SCHEMA:
            lacking = [f.name for f in dataclasses.fields(self) if f.name not in _OPTIONAL
                       and getattr(self, f.name) is None]
            if lacking:
                raise ValueError(f"a schema {SCHEMA} record needs {', '.join(f'`{n}`' for n in lacking)}")

    @property
    def setting_budget(self) -> int | str:
        """The budget its setting is known by: the grid's B in a sweep, else the budget it ran with."""
        return self.budget if self.sweep is None else self.sweep.grid_budget

    @property
    def warmup(self) -> bool:
        """A sweep's warm-up decode (never counted)."""
        return self.sweep is not None and self.sweep.warmup

    def phase(self, name: str) -> list[float]:
        """Each round's seconds in phase `name` (zeros where the record has none of it)."""
        return self.phases.get(name, [0.0] * self.rounds)

    def placed(self, sweep: SweepPlace | None = None) -> DecodeRecord:
        """The same record with where a sweep ran it (None: kept as it was)."""
        return dataclasses.replace(self, sweep=sweep or self.sweep)

    def to_json(self) -> dict:
        """The JSON object of its schema, fields in the order every program has written them."""
        out: dict = {"kind": "decode"}
        for name in _ORDER:
            value = getattr(self, name)
            if name in _SINCE_3 and self.schema < 3 or name in _ADDED and value is None:
                continue
            out[name] = list(value) if isinstance(value, tuple) else value
        if self.sweep is not None:
            out.update(grid_budget=self.sweep.grid_budget, position=self.sweep.position, warmup=self.sweep.warmup,
                       shard=self.sweep.shard)
        if self.bench is not None:
            out.update(bench_budget=self.bench.budget, bench_variant=self.bench.variant)
        return out

    @classmethod
    def from_json(cls, obj: object, where: str = "a record") -> DecodeRecord:
        """The record a JSON object holds, of any schema in READABLE; ValueError naming `where` (a file and line)
        and the field for an object that is not one, UnreadSchema for a schema not read."""
        if not isinstance(obj, dict) or obj.get("kind") != "decode":
            what = f"kind {obj.get('kind')!r}" if isinstance(obj, dict) else type(obj).__name__
            raise ValueError(f"{where}: not a decode record ({what})")
        schema = obj.get("schema", 1)
        if schema not in _READERS:
            why = "written before outputs were cut at the limit" if schema == 1 else "unknown to this version"
            raise UnreadSchema(f"{where}: a record of schema {schema}, {why} (this version reads schemas "
                               f"{', '.join(map(str, READABLE))})")
        r = _Reader(obj, where, schema)
        fields = _READERS[schema](r)
        if obj.keys() & {"grid_budget", "position", "warmup", "shard"}:
            fields["sweep"] = SweepPlace(r.take("grid_budget", _budget), r.take("position", _int),
                                         r.take("warmup", _bool), r.take("shard", _str))
        if obj.keys() & {"bench_budget", "bench_variant"}:
            fields["bench"] = BenchPlace(r.take("bench_budget", _budget, null=True),
                                         r.take("bench_variant", _str, null=True))
        try:
            return cls(schema=schema, **fields)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


def decode_record(result: DecodeResult, config: DecodeConfig, *, prompt_id: str, category: str, turn: int,
                  prompt_token_ids: Sequence[int], text: str, prompt: str = "", stop_reason: str | int | None = None,
                  load_average: tuple[float, float] = (0.0, 0.0),
                  logprobs: list[list[list[float]]] | None = None) -> DecodeRecord:
    """The record of one decode; `load_average`: machine_load() as it started and as it ended; `logprobs`: each
    output token's log-probabilities, where asked for (target_proc.logprobs)."""
    rounds = result.rounds
    return DecodeRecord(
        prompt_id=prompt_id, category=category, turn=turn,
        decoder=config.decoder, temperature=config.temperature, top_k=config.top_k,
        top_p=config.top_p, min_p=config.min_p, stop_strings=list(config.stop),
        stop_token_ids=list(config.stop_token_ids), ignore_eos=config.ignore_eos, budget=config.budget,
        seed=config.seed, max_new_tokens=config.max_new_tokens, prompt=prompt,
        prompt_tokens=len(prompt_token_ids), prompt_token_ids=[int(t) for t in prompt_token_ids],
        new_tokens=len(result.tokens), token_ids=list(result.tokens), text=text,
        finish_reason="length" if result.hit_limit else "stop", stop_reason=stop_reason,
        overshoot=result.overshoot, stop=result.finish,
        seconds=result.seconds, prefill_seconds=result.prefill_seconds,
        tokens_per_second=result.tokens_per_second, rounds=len(rounds), target_passes=result.target_passes,
        accept_lengths=[r.emitted for r in rounds], accepted=[r.accepted for r in rounds],
        tried=[r.tried for r in rounds], tree_sizes=[r.tree_size for r in rounds],
        available=[r.available for r in rounds], budgets=[r.budget for r in rounds],
        phases={name: [r.phases.seconds(name) for r in rounds] for name in PHASES},
        lend_cores=config.lend_cores, ahead=config.ahead, ahead_hits=[r.ahead for r in rounds],
        ahead_seconds=[r.ahead_seconds for r in rounds],
        cut_pools=config.cut_pools, cut_weigh=config.cut_weigh, pool_depths=[r.pool_depth for r in rounds],
        drafter_window=config.drafter_window, held_rows=[int(r.held_row) for r in rounds],
        feature_bytes=[r.feature_bytes for r in rounds],
        lookup=config.lookup if RULES[config.decoder].select is not None else 0, copied=[r.copied for r in rounds],
        load_average=list(load_average), cpus=usable_cpus(),
        finished=time.time(), logprobs=logprobs,
    )


# ---- reading: one function per schema ------------------------------------------------------------------------

_ORDER = ("schema", "prompt_id", "category", "turn", "decoder", "temperature", "top_k", "top_p", "min_p",
          "stop_strings", "stop_token_ids", "ignore_eos", "budget", "seed", "max_new_tokens", "prompt",
          "prompt_tokens", "prompt_token_ids", "new_tokens", "token_ids", "text", "finish_reason", "stop_reason",
          "overshoot", "stop", "seconds", "prefill_seconds", "tokens_per_second", "rounds", "target_passes",
          "accept_lengths", "accepted", "tried", "tree_sizes", "available", "budgets", "phases", "lend_cores",
          "ahead", "ahead_hits", "ahead_seconds", "cut_pools", "cut_weigh", "pool_depths", "drafter_window",
          "held_rows", "feature_bytes", "lookup", "copied", "load_average", "cpus", "finished", "logprobs")
_PLACES = frozenset({"kind", "schema", "grid_budget", "position", "warmup", "shard", "bench_budget", "bench_variant"})
_SINCE_3 = frozenset({"stop_strings", "stop_token_ids", "prompt", "finish_reason", "stop_reason"})
# Written only where known: schema 4 has them all (`feature_bytes` and `ignore_eos` since they were added);
# earlier records as the code of their day wrote them.
_ADDED = frozenset({"top_k", "top_p", "min_p", "budgets", "lend_cores", "ahead", "ahead_hits", "ahead_seconds",
                    "cut_pools", "cut_weigh", "pool_depths", "drafter_window", "held_rows", "prompt_token_ids",
                    "load_average", "cpus", "feature_bytes", "ignore_eos", "lookup", "copied", "logprobs"})
# None in a schema 4 record too: no stop matched, no sweep or benchmark ran it, a column added while 4 stood.
_OPTIONAL = frozenset({"stop_reason", "sweep", "bench", "feature_bytes", "ignore_eos", "lookup", "copied",
                       "logprobs"})


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _str(v: object) -> bool:
    return isinstance(v, str)


def _bool(v: object) -> bool:
    return isinstance(v, bool)


def _budget(v: object) -> bool:
    return _int(v) or _str(v)


def _list_of(item: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


def _stop(v: object) -> bool:
    return _str(v) or _int(v)


_ints, _nums, _strs = _list_of(_int), _list_of(_num), _list_of(_str)
_logprobs = _list_of(_list_of(_nums))  # per token: [token, log-probability, rank] lists


def _phases(v: object) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _nums(x) for k, x in v.items())


_WHAT = {_int: "an integer", _num: "a number", _str: "a string", _bool: "true or false", _budget: "an integer or a "
         "name", _stop: "a string or an integer", _ints: "a list of integers", _nums: "a list of numbers",
         _strs: "a list of strings", _logprobs: "a list of lists of [token, log-probability, rank]", _phases: "an object of per-phase lists of numbers"}


class _Reader:
    """Takes a record's fields one by one, each checked, naming the line and the field when one is wrong."""

    def __init__(self, obj: dict, where: str, schema: int) -> None:
        self.obj, self.where, self.schema = obj, where, schema

    def take(self, name: str, check: Callable[[object], bool], null: bool = False):
        """A field the record must have; null only where `null` allows it."""
        if name not in self.obj:
            raise ValueError(f"{self.where}: a schema {self.schema} record lacks `{name}`")
        if self.obj[name] is None and not null:
            raise ValueError(f"{self.where}: `{name}` must be {_WHAT[check]}, got null")
        return self.given(name, check)

    def given(self, name: str, check: Callable[[object], bool]):
        """The field, or None where the record has none (fields added while its schema stood)."""
        value = self.obj.get(name)
        if value is not None and not check(value):
            raise ValueError(f"{self.where}: `{name}` must be {_WHAT[check]}, got {str(value)[:40]!r}")
        return value

    def fields(self, required: dict, added: dict, *others: str) -> dict:
        """The schema's fields: `required` each present, `added` where given; any other than these, `others`
        and where a sweep or a benchmark ran it is not a field of the schema, and refused."""
        unknown = self.obj.keys() - required.keys() - added.keys() - set(others) - _PLACES
        if unknown:
            raise ValueError(f"{self.where}: `{sorted(unknown)[0]}` is not a field of a schema {self.schema} record")
        return {**{n: self.take(n, c) for n, c in required.items()}, **{n: self.given(n, c) for n, c in added.items()}}


_V2_REQUIRED = {"prompt_id": _str, "category": _str, "turn": _int, "decoder": _str, "temperature": _num,
                "budget": _budget, "seed": _int, "max_new_tokens": _int, "prompt_tokens": _int, "new_tokens": _int,
                "token_ids": _ints, "text": _str, "overshoot": _int, "stop": _str, "seconds": _num,
                "prefill_seconds": _num, "tokens_per_second": _num, "rounds": _int, "target_passes": _int,
                "accept_lengths": _ints, "accepted": _ints, "tried": _ints, "tree_sizes": _ints, "available": _ints,
                "phases": _phases, "finished": _num}
_V2_ADDED = {"top_k": _int, "top_p": _num, "min_p": _num, "budgets": _ints, "ahead": _bool, "ahead_hits": _ints,
             "ahead_seconds": _nums}
_V3_REQUIRED = {**_V2_REQUIRED, "top_k": _int, "top_p": _num, "min_p": _num, "stop_strings": _strs,
                "stop_token_ids": _ints, "prompt": _str, "finish_reason": _str, "budgets": _ints}
_V3_ADDED = {"lend_cores": _bool, "ahead": _bool, "ahead_hits": _ints, "ahead_seconds": _nums, "cut_pools": _bool,
             "cut_weigh": _bool, "pool_depths": _ints, "drafter_window": _int, "held_rows": _ints}
_V4_REQUIRED = {**_V3_REQUIRED, **_V3_ADDED, "prompt_token_ids": _ints, "load_average": _nums, "cpus": _int}
_V4_ADDED = {"feature_bytes": _ints, "ignore_eos": _bool, "lookup": _int, "copied": _ints, "logprobs": _logprobs}


def _v2(r: _Reader) -> dict:
    """Schema 2: no prompt text, no stop settings; how it ended only as `stop`."""
    fields = r.fields(_V2_REQUIRED, _V2_ADDED)
    return {**fields, "finish_reason": "length" if fields["stop"] == "limit" else "stop"}


def _v3(r: _Reader) -> dict:
    """Schema 3: the prompt's text and the stop fields; the drafter's settings as they were added."""
    fields = r.fields(_V3_REQUIRED, _V3_ADDED, "stop_reason")
    return {**fields, "stop_reason": r.take("stop_reason", _stop, null=True)}


def _v4(r: _Reader) -> dict:
    """Schema 4: every field, the prompt's token ids and the machine's load among them; the features' bytes as
    they were added."""
    fields = r.fields(_V4_REQUIRED, _V4_ADDED, "stop_reason")
    if len(fields["load_average"]) != 2:
        raise ValueError(f"{r.where}: `load_average` must be two numbers, got {fields['load_average']!r}")
    return {**fields, "stop_reason": r.take("stop_reason", _stop, null=True)}


_READERS = {2: _v2, 3: _v3, 4: _v4}


def record_key(record: DecodeRecord) -> tuple:
    """What makes a decode the same decode in any shard: (prompt id, turn, decoder, T, the setting's B, seed,
    warm-up); a rounds file keys its decodes the same way (evaluation.rounds.decode_key)."""
    return (record.prompt_id, record.turn, record.decoder, float(record.temperature), record.setting_budget,
            record.seed, record.warmup)
