"""A decode's result as the Python API returns it, shaped like vLLM's outputs: the prompt's and the output's
text and token ids, how the output ended (`finish_reason`, `stop_reason`), and the decode's metrics (times,
rounds, acceptance). `record` is the decode's record (evaluation.record), the same record the command line's
--json prints and sweeps keep, so that an output serialises as one (`json.dumps(output.record.to_json())`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluation.record import DecodeRecord
from pipeline.metrics import round_stats

FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True, slots=True)
class DecodeMetrics:
    """What a decode took and how its rounds went."""

    seconds: float  # from the start of the prefill to the last commit
    prefill_seconds: float
    tokens_per_second: float  # output tokens over `seconds`
    rounds: int
    target_passes: int  # after the prefill
    tau: float  # tokens per round, the bonus token included (Spec-Bench's mean accepted tokens)
    acceptance: tuple[float, ...]  # by depth d = 1, 2, ...: rounds that accepted a node at depth d among those
    #                                that reached depth d - 1 with candidates below it
    mean_tree_size: float  # nodes verified per round that ran a tree pass (0: none did)
    accept_lengths: tuple[int, ...]  # per round, the bonus token included
    tree_sizes: tuple[int, ...]  # per round (0: a plain round)
    finished_time: float  # when the decode ended (Unix time)
    load_average: tuple[float, float] | None = None  # the machine's, as the decode started and ended

    @classmethod
    def of(cls, record: DecodeRecord) -> DecodeMetrics:
        stats = round_stats(record.accept_lengths, record.accepted, record.tried, record.tree_sizes)
        load = record.load_average
        return cls(record.seconds, record.prefill_seconds, record.tokens_per_second, record.rounds,
                   record.target_passes, stats.tau, tuple(stats.acceptance), stats.mean_tree_size,
                   tuple(record.accept_lengths), tuple(record.tree_sizes), record.finished,
                   tuple(load) if load else None)


@dataclass(frozen=True, slots=True)
class DecodeOutput:
    """One decode (one turn of a conversation): what went in, what came out, how it ended and what it took."""

    prompt_id: str
    prompt: str  # the context's text, chat template included
    prompt_token_ids: list[int] | None  # None in records written before they kept them (schema 3)
    text: str  # the output, cut before a stop string; a stop token id's text left out
    token_ids: list[int]  # the output, its last token the stop where one ended it
    finish_reason: str  # "stop" (end of sequence, a stop token id or string) or "length" (max_new_tokens)
    stop_reason: str | int | None  # the stop string or stop token id that matched, else None
    decoder: str
    turn: int  # the user turn it answers (0: the first)
    metrics: DecodeMetrics
    record: DecodeRecord = field(repr=False)

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"`finish_reason` must be one of {', '.join(FINISH_REASONS)}, got {self.finish_reason!r}")

    @classmethod
    def of(cls, record: DecodeRecord) -> DecodeOutput:
        """The output a decode record describes."""
        return cls(record.prompt_id, record.prompt, record.prompt_token_ids, record.text,
                   list(record.token_ids), record.finish_reason, record.stop_reason, record.decoder,
                   record.turn, DecodeMetrics.of(record), record)


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """What a streamed decode gives as a round commits: the tokens it added and the text they add (a stop
    string's text never shown); the last chunk of a decode carries its `output` and adds nothing."""

    token_ids: list[int]
    text: str
    output: DecodeOutput | None = None

    @property
    def finished(self) -> bool:
        return self.output is not None
