"""What `values --check` finds in runs' rounds files and their records (DESIGN.md section 8), one finding each:
every damaged or impossible chunk, every chunk set aside (another run's, or a decode's second), every file that
ends on a chunk boundary before decodes its records list, every timed decode whose record has no readable
rounds and every decode whose rounds have no record (a decode killed between its chunk and its record: it
runs again when the sweep resumes). Chunks recovered by their checksum and chunks superseded by a later one of
the same decode are counted, not problems."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluation.record import DecodeRecord, record_key
from evaluation.rounds import decode_key, key_text
from evaluation.rounds_file import RoundsFile, ends_early, records_beside


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing `--check` says: `kind` one of damaged, set-aside, cut-short, no-rounds, no-record."""

    kind: str
    file: str
    decode: str
    message: str


@dataclass(slots=True)
class Checked:
    """Every finding, with the counts the summary line gives."""

    findings: list[Finding]
    files: int
    decodes: int
    records: int
    recovered: int
    superseded: int

    def summary(self) -> str:
        later = f", {self.superseded} chunk(s) superseded by a later one" if self.superseded else ""
        found = f"{len(self.findings)} problem(s)" if self.findings else "nothing damaged or missing"
        return (f"{self.files} rounds file(s), {self.decodes} decodes readable, {self.records} records, "
                f"{self.recovered} chunk(s) recovered by their checksum{later}: {found}")

    def json_lines(self) -> list[dict]:
        """One object per finding, then the counts (`kind` "summary")."""
        counts = {name: getattr(self, name) for name in ("files", "decodes", "records", "recovered", "superseded")}
        return [asdict(f) for f in self.findings] + [{"kind": "summary", **counts, "problems": len(self.findings)}]


def timed_keys(records: Sequence[DecodeRecord]) -> list[tuple]:
    """The decode keys of the timed records (warm-ups have no rounds), in their order."""
    return [record_key(r) for r in records if not r.warmup]


def check_rounds(files: Sequence[RoundsFile], records: Mapping[Path, Sequence[DecodeRecord]]) -> Checked:
    """The findings of `files` (as load_rounds read them) against `records`: each records file's records, in order,
    keyed by its resolved path (runs without records files have none, and their rounds are not asked for records)."""
    findings = [Finding("set-aside" if d.aside else "damaged", str(d.path), d.decode, str(d))
                for f in files for d in f.damage if d.problem]
    recorded = {k for rs in records.values() for k in timed_keys(rs)}
    for f in files:
        beside = records.get(records_beside(f.path).resolve())
        if beside is not None and (cut := ends_early(f, timed_keys(beside))):
            findings.append(Finding("cut-short", str(f.path), "", str(cut)))
        if any(Path(p).parent == f.path.resolve().parent for p in records):
            findings += [Finding("no-record", str(f.path), f"decode {key_text(d.key)}",
                                 f"{f.path}: the rounds of decode {key_text(d.key)} have no record (a decode "
                                 f"stopped between its rounds and its record runs again when the sweep resumes)")
                         for d in f.decodes if not d.key.get("warmup") and decode_key(d.key) not in recorded]
    have = {decode_key(d.key) for f in files for d in f.decodes}
    seen = set()
    for path, rs in records.items():
        for r in rs:
            if not r.warmup and (k := record_key(r)) not in have and k not in seen:
                seen.add(k)
                words = (f"prompt_id={r.prompt_id!r} turn={r.turn} decoder={r.decoder} temperature="
                         f"{r.temperature:g} budget={r.setting_budget} seed={r.seed}")
                findings.append(Finding("no-rounds", str(path), f"decode {words}",
                                        f"no readable rounds for the recorded decode {words}"))
    damage = [d for f in files for d in f.damage]
    return Checked(findings, len(files), sum(len(f.decodes) for f in files), sum(len(rs) for rs in records.values()),
                   sum(d.recovered for d in damage), sum(d.superseded for d in damage))
