"""The one runner of a program's decodes: each decode of a list in order, its rounds kept, its progress said.

A decode run (programs.target_program) and a timing sweep (timing.sweep) both run their decodes here: every turn
of each prompt (target_proc.conversation), with --record-rounds its rounds appended just before its record, and a
log line per turn with the run's count and time left (programs.progress)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.prompts import Prompt
from evaluation.record import DecodeRecord, SweepPlace
from evaluation.rounds import round_key
from evaluation.rounds_file import RoundStore
from pipeline.settings import DecodeConfig
from programs.progress import Progress
from target_proc.conversation import decode_conversation
from target_proc.recorder import RECORDING

log = logging.getLogger("target")


@dataclass(frozen=True, slots=True)
class Decode:
    """One decode to run: every turn of `prompt` under `config`.
    done: records of its turns recorded before (a resumed sweep), reused rather than decoded again. where: where a sweep
    ran it (grid budget, position...), put on each of its records and its rounds' keys. counted: whether its records are
    handed on, kept and counted; a warm-up decoded again at a restart is decoded (it warms the process up) and nothing
    else. keep_rounds: whether its rounds go to the rounds file (a sweep keeps no warm-up's)."""

    prompt: Prompt
    config: DecodeConfig
    done: dict = field(default_factory=dict)
    where: SweepPlace | None = None
    counted: bool = True
    keep_rounds: bool = True
    warmup: bool = False

    def label(self) -> str:
        """How the progress and the log name it: "warm-up pearl T=0 B=59 seed 0"."""
        c = self.config
        return f"{'warm-up ' if self.warmup else ''}{c.decoder} T={c.temperature:g} B={c.budget} seed {c.seed}"


def rounds_file(path: Path | None, header: dict, vocab: int | None = None) -> AbstractContextManager:
    """The rounds file at `path`, opened to append (a resumed shard's is repaired first; what that found is
    logged), or nothing where `path` is None; `vocab`, the target's vocabulary, joins the run's identity."""
    if path is None:
        return nullcontext()
    store = RoundStore(path, header, RECORDING, vocab)
    for note in store.notes:
        log.warning("%s", note)
    return store


def run_decodes(session, decodes: Iterable[Decode], progress: Progress,
                rounds: RoundStore | None = None) -> Iterator[DecodeRecord]:
    """Run each decode in turn -> the record of each turn decoded and counted, as soon as it ends (with
    `rounds`, its rounds appended there just before). Budget auto's pass timings are ready before the first
    decode (timed there where this machine keeps none), outside the time left that the progress says."""
    decodes = list(decodes)
    with progress.aside():
        auto = {d.config.budget_max for d in decodes if d.config.auto and len(d.done) < len(d.prompt.turns)}
        for cap in sorted(auto):
            session.budgets.timings(cap)
    for d in decodes:
        keep = None if rounds is None or not d.keep_rounds or not d.counted else \
            (lambda record, recorded, where=d.where: rounds.append(
                {**round_key(record), **(dataclasses.asdict(where) if where else {})}, recorded, record.prompt_tokens))
        for record in decode_conversation(session, d.prompt, d.config, d.done, keep):
            if d.where is not None:
                record = record.placed(d.where)
            count = progress.step(f"{d.prompt.id} {d.config.decoder}") if d.counted else "again, not recorded"
            log.info("%s%s %s %4d tokens %6.2f s %7.1f tok/s%s", d.prompt.id,
                     f" turn {record.turn + 1}" if d.prompt.later else "", d.label(), record.new_tokens,
                     record.seconds, record.tokens_per_second, f"  [{count}]" if count else "")
            if d.counted:
                yield record
