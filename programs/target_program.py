"""python -m programs.target_program: the target process of a decode run (launch/pair.sh starts it with its drafter).

Loads the target, connects to the drafter at --endpoint and runs every requested decode. A live line per
decode goes to stderr. With --json, stdout carries JSON lines: first the run's provenance ("kind": "run"),
then one record per decode as soon as it ends ("decode", evaluation.record), last the summary ("summary").
`build_parser` and `parse` are shared with the sweep's target process (timing.sweep)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TextIO
from dataclasses import dataclass

from evaluation.machine import device_words, drafter_name, machine_line
from evaluation.prompts import Prompt, gather
from evaluation.provenance import environment
from evaluation.cautions import PAIR_THREADS, loaded
from evaluation.record import SCHEMA, DecodeRecord, machine_load
from evaluation.rounds_file import RoundStore, rounds_path
from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import DELIVERED, as_json
from evaluation.tally import Tally
from evaluation.verdict import verdict_lines, verdict_of
from models.kernel_cache import usable_cpus
from models.options import ModelOptions
from pipeline.budget import MeasuredPasses
from pipeline.config import InputError, PoolConfig, is_int
from pipeline.settings import DecodeConfig
from programs.cli import (Parser, add_endpoint, add_log_level, add_options, args_of, endpoint_option, flags_of,
                          from_options, option_values, raise_open_file_limit, run_program, setup_logging)
from programs import decodes
from programs.budget_pick import pick_budget
from programs.options import ConnectOptions, KeyOptions, RunOptions
from programs.progress import Progress, process_age
from target_proc.conversation import decode_context, decode_conversation
from target_proc.session import TargetSession, open_session
from target_proc.stops import StopStrings

log = logging.getLogger("target")


@dataclass(frozen=True, slots=True)
class TargetArgs:
    model: ModelOptions
    pool: PoolConfig
    connect: ConnectOptions
    run: object  # the program's run options: RunOptions or SweepOptions
    endpoint: str
    namespace: argparse.Namespace  # for the program's own extra arguments


def build_parser(prog: str, description: str, run_cls: type) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description=description)
    add_options(parser, ModelOptions)
    add_endpoint(parser, "the drafter's ipc://PATH or tcp://HOST:PORT")
    add_options(parser, PoolConfig, prefix="pool-")
    add_options(parser, run_cls)
    add_options(parser, ConnectOptions)
    add_options(parser, KeyOptions, skip=("curve",))  # CURVE is on when --drafter-key names the drafter
    add_log_level(parser)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the Python API's target
    parser.add_argument("--no-drafter", action="store_true", help=argparse.SUPPRESS)  # its target alone, plain
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, run_cls: type) -> TargetArgs:
    """Parse and check; a bad value exits with a usage error naming its flag."""
    ns = parser.parse_args(args_of(parser, argv))
    args = TargetArgs(from_options(parser, ns, ModelOptions), from_options(parser, ns, PoolConfig, prefix="pool-"),
                      from_options(parser, ns, ConnectOptions), from_options(parser, ns, run_cls),
                      endpoint_option(parser, ns.endpoint), ns)
    setup_logging("target" if run_cls is RunOptions else "timing", ns.log_level)
    return args


def connect(args: TargetArgs):
    """The session context of a target program: load, connect and handshake."""
    raise_open_file_limit()
    endpoint = None if args.namespace.no_drafter else args.endpoint
    return open_session(args.model, endpoint, args.pool, args.connect.drafter_timeout,
                        args.connect.ready_timeout, args.connect.drafter_key, args.namespace.key_dir,
                        args.connect.connect_timeout)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("python -m programs.target_program", "The target process: drives the rounds of every decode.",
                          RunOptions)
    args = parse(parser, argv, RunOptions)

    def body() -> int:
        if args.namespace.serve:
            with connect(args) as session:
                serve(session, sys.stdin, sys.stdout)
            return 0
        run: RunOptions = args.run
        prompts = gather(run.sources, run.decode.seed)
        emit = (lambda line: print(json.dumps(line), flush=True)) if run.json else None
        first = None
        with connect(args) as session:
            if run.pick_budget and (picked := pick_budget(session, run))[1]:
                run = picked[0]
                log.info("%s", picked[1])
            # a running tally, not the records: a long run's memory stays flat
            tally = Tally(run.decode.temperature, run.decode.budget, speed_tokens=DELIVERED)
            header = run_header(session.models, args.pool, option_values(run), prompts)
            if emit:
                emit(header)
            total = decode_count(prompts, run)
            age = process_age()
            log.info("decoding: %s%s%s", plan_text(prompts, run, total),
                     "" if age is None else f" (ready {age:.1f} s after this process started)",
                     load_note(machine_load(), usable_cpus()))
            with _round_store(run, header, session.target.runner.vocab_size) as rounds, Progress(total) as progress:
                for record in run_decodes(session, prompts, run, rounds, progress):
                    first = first or record
                    tally.add(record)
                    if emit:
                        emit(record.to_json())
        setting = tally.setting()
        if emit:
            emit({"kind": "summary", **as_json(setting)})
        else:
            print_summary(first, setting, args.pool, header, run.decode.lookup,
                          session.budgets.measured.get(run.decode.budget_max))
        return 0

    return run_program(body, flags_of(parser))


class Cancelled(Exception):
    """A request the caller gave up on: its decode stops at its next round."""


class Inbox:
    """The request lines of --serve, read on a thread of their own so that a cancel ({"cancel": N}: stop
    request N and any before it) takes effect while a decode runs; other lines are handed on in order."""

    def __init__(self, requests: TextIO) -> None:
        self.upto = 0  # requests numbered up to this one are cancelled
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(requests,), name="specpair-requests", daemon=True).start()

    def _read(self, requests: TextIO) -> None:
        for line in requests:
            try:
                said = json.loads(line)
            except ValueError:
                said = None
            if isinstance(said, dict) and said.keys() == {"cancel"} and isinstance(said["cancel"], int):
                self.upto = max(self.upto, said["cancel"])
            else:
                self._lines.put(line)
        self._lines.put(None)  # the end of the requests

    def __iter__(self) -> Iterator[str]:
        while (line := self._lines.get()) is not None:
            yield line

    def cancelled(self, number) -> bool:
        return isinstance(number, int) and number <= self.upto


def serve(session: TargetSession, requests: TextIO, answers: TextIO) -> None:
    """The Python API's target process: one JSON request per line ({"request", "id", "category", "turns",
    "config"}), answered by a record per turn and a line {"kind": "done"}, or by {"kind": "error"}, each
    carrying the request's number, so that the caller can tell the answers of a request it gave up on from
    those of the next; the first line says the session is ready. A line {"cancel": N} stops request N at its
    next round ({"kind": "cancelled"}, then "done"), so that the next request starts at once. Ends at the end
    of the requests. A request {"timings": [cap, ...]} readies budget auto's pass timings (time_passes)."""
    def say(line: dict, number) -> None:
        answers.write(json.dumps({**line, "request": number}) + "\n")
        answers.flush()

    say({"kind": "ready", "models": session.models}, None)
    inbox = Inbox(requests)
    for line in inbox:
        number = None
        try:
            request = json.loads(line)
            number = request.get("request") if isinstance(request, dict) else None
            streamed = (lambda chunk: say({"kind": "tokens", **chunk}, number)) if request.get("stream") else None
            if "timings" in request:
                time_passes(session, request["timings"])
            else:
                for record in request_records(session, request, streamed, lambda: inbox.cancelled(number)):
                    say(record.to_json(), number)
        except Cancelled:
            say({"kind": "cancelled"}, number)
        except (InputError, ValueError, KeyError, TypeError, AttributeError) as e:  # a bad request; serving goes on
            say({"kind": "error", "input": isinstance(e, InputError), "message": f"{type(e).__name__}: {e}"},
                number)
            continue
        say({"kind": "done"}, number)


def time_passes(session: TargetSession, caps) -> None:
    """Budget auto's pass timings at each of `caps` ready (timed now where this machine keeps none), before the
    decodes that need them: a request {"timings": [cap, ...]} of the Python API, which keeps that wait out of
    its progress's time left."""
    if not isinstance(caps, list) or not all(is_int(cap) and cap > 0 for cap in caps):
        raise InputError(f"`timings` must be a list of whole numbers > 0 (budget caps), got {caps!r}")
    for cap in caps:
        session.budgets.timings(cap)


def request_records(session: TargetSession, request: dict, on_text: Callable[[dict], None] | None = None,
                    cancelled: Callable[[], bool] | None = None) -> Iterator[DecodeRecord]:
    """The records answering one request of the Python API ({"id", "category", "config", and "turns" or
    "context": token ids or chat messages; "logprobs", where each output token's log-probabilities and the
    top that many of its row are asked for}), in the target process or in the caller's; `on_text` gets
    {"tokens", "text"} as each round commits tokens (streaming: TextStream's chunks); once `cancelled()`
    says so, the decode raises Cancelled at its next round (or before it starts)."""
    config = DecodeConfig(**request["config"])
    stream = TextStream(session.tokenizer, config)

    def on_tokens(tokens: list[int]) -> None:
        if cancelled is not None and cancelled():
            raise Cancelled
        if on_text is not None:
            on_text(stream.add(tokens))
    if cancelled is not None and cancelled():
        raise Cancelled
    given = on_tokens if on_text is not None or cancelled is not None else None
    logprobs = request.get("logprobs")
    if not (logprobs is None or (is_int(logprobs) and logprobs >= 0)):
        raise InputError(f"`logprobs` must be a whole number >= 0, got {logprobs!r}")
    if "context" in request:
        records = [decode_context(session, request["context"], config, prompt_id=str(request["id"]),
                                  category=str(request["category"]), on_tokens=given, logprobs=logprobs)]
    else:
        prompt = Prompt(str(request["id"]), str(request["category"]), *_turns(request["turns"]))
        records = decode_conversation(session, prompt, config, on_tokens=given, logprobs=logprobs)
    for record in records:
        if on_text is not None and (rest := stream.rest(record.text)):
            on_text(rest)
        stream = TextStream(session.tokenizer, config)  # the next turn's
        yield record


class TextStream:
    """The text a stream of output tokens adds, round by round, as the record's text will hold it: decoding
    the whole output each time, so that tokens that make up one character together are shown once complete;
    a stop token id's text left out; text cut before a stop string, and a tail that may begin one held back
    until the next tokens tell (`rest` gives what is held back once the record is there)."""

    def __init__(self, tokenizer, config: DecodeConfig) -> None:
        self.tokenizer, self.tokens, self.text = tokenizer, [], ""
        self.stops, self.stop_ids = StopStrings(tokenizer, config.stop), frozenset(config.stop_token_ids)

    def add(self, tokens: list[int]) -> dict:
        self.tokens += tokens
        ended = bool(self.tokens) and self.tokens[-1] in self.stop_ids  # only the output's last can be
        text = self.stops.text(self.tokens[:-1] if ended else self.tokens)
        if (found := self.stops.first(text)) is not None:
            text = text[: found[0]]
        else:
            text = text[: len(text) - self._held(text)]
        if not text.startswith(self.text):  # a tokenizer that rewrites earlier text: nothing new to show yet
            return {"tokens": list(tokens), "text": ""}
        new, self.text = text[len(self.text):], text
        return {"tokens": list(tokens), "text": new}

    def rest(self, final: str) -> dict | None:
        """The chunk that completes the streamed text to the record's `final` text, or None."""
        if len(final) <= len(self.text) or not final.startswith(self.text):
            return None
        new, self.text = final[len(self.text):], final
        return {"tokens": [], "text": new}

    def _held(self, text: str) -> int:
        """The length of the longest end of `text` that begins a stop string (0: none)."""
        return max((k for s in self.stops.strings for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def _turns(turns) -> tuple[str, tuple[str, ...]]:
    if not (isinstance(turns, list) and turns and all(isinstance(t, str) and t for t in turns)):
        raise InputError("`turns` must be a list of non-empty strings")
    return turns[0], tuple(turns[1:])


def _round_store(run: RunOptions, header: dict, vocab: int) -> AbstractContextManager:
    """DIR/rounds.shard-1-of-1.bin with --record-rounds DIR (a decode run is one shard; its run's identity holds
    the target's vocabulary), else nothing."""
    if not run.record_rounds:
        return decodes.rounds_file(None, header, vocab)
    run.check_rounds_file()  # again, now: another run may have written one while the models loaded
    path = rounds_path(run.record_rounds, 1, 1)
    if run.overwrite:  # this run's rounds alone, never appended to another's
        path.unlink(missing_ok=True)
    return decodes.rounds_file(path, header, vocab)


def run_header(models: dict, pool: PoolConfig, settings: dict, prompts: list[Prompt]) -> dict:
    """The provenance line of a run: both models, the pool, the settings, the prompts and the machine."""
    return {"kind": "run", "schema": SCHEMA, "models": models, "pool": dataclasses.asdict(pool),
            "settings": settings, "prompts": [p.id for p in prompts], "environment": environment()}


def decode_count(prompts: list[Prompt], run: RunOptions) -> int:
    """The decodes a run makes: one per turn of every prompt, for every decoder and seed."""
    return sum(len(p.turns) for p in prompts) * len(run.configs())


def plan_text(prompts: list[Prompt], run: RunOptions, total: int) -> str:
    """What a run decodes and how long it may be, in words: "2 prompts x 5 decoders = 10 decodes of up to 64 new
    tokens (640 in all); the time left follows each decode"."""
    turns = sum(len(p.turns) for p in prompts)
    parts = [_count(len(prompts), "prompt") + (f" ({turns} turns)" if turns != len(prompts) else ""),
             _count(len(run.decoder_list), "decoder")] + ([_count(run.num_seeds, "seed")] if run.num_seeds > 1 else [])
    limit = run.decode.max_new_tokens
    return (" x ".join(parts) + f" = {_count(total, 'decode')} of up to {limit} new tokens ({total * limit:,} in all);"
            f" the time left follows each decode")


def load_note(load: float, cpus: int) -> str:
    """Where the machine is busier than the pair keeps it (evaluation.cautions.loaded), a word that the run will
    take longer than on a quiet machine; "" otherwise."""
    if not loaded([load], cpus):
        return ""
    return (f"; the machine is busy (load average {load:.1f} on {cpus} CPUs, the pair keeps {cpus + PAIR_THREADS} "
            f"busy itself): it will take longer than on a quiet machine, with noisier timings")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def run_decodes(session: TargetSession, prompts: list[Prompt], run: RunOptions, rounds: RoundStore | None = None,
                progress: Progress | None = None) -> Iterator[DecodeRecord]:
    """Every decode of every prompt (one record per turn), each yielded as soon as it ends, through the one
    decode runner (programs.decodes)."""
    todo = [decodes.Decode(prompt, config) for prompt in prompts for config in run.configs()]
    return decodes.run_decodes(session, todo, progress or Progress(decode_count(prompts, run), bar=False), rounds)


def print_summary(first: DecodeRecord | None, setting, pool: PoolConfig, header: dict | None = None,
                  lookup: int = 0, measured: MeasuredPasses | None = None) -> None:
    """The first decode's text, the machine and drafter the run's `header` names, then one row per decoder:
    speed, speedup over `ar` with its paired interval over prompts, τ, tokens per target pass, mean tree size
    and acceptance by depth; last the verdict in words (evaluation.verdict) on that machine and drafter, with
    `measured`, this machine's pass timings where the run used them, what its passes cost here."""
    if first is None:
        return
    print(f"--- {first.prompt_id}, {first.decoder}:\n{first.text.strip()}\n")
    header = header or {}
    print(machine_line(header))
    chains = f" + context lookup {lookup}" if lookup else ""
    print(f"pool topk={pool.topk} depth={pool.depth} expand={pool.expand}{chains}; T={setting.temperature:g} "
          f"B={setting.budget}; speed: output tokens over seconds from prefill to last commit; "
          f"{len(setting.prompt_ids)} prompts")
    head = f"{'decoder':<11}{'decodes':>8}{'tokens':>8}{'seconds':>9}{'tok/s':>8}  {'vs ar [95% interval]':<24}" \
           f"{'tau':>6}{'tok/pass':>9}{'tree':>6}  acceptance by depth"
    print(head)
    for d, st in setting.decoders.items():
        gain = setting.gains.get((d, "ar"))
        flag = "⚠ " if any(c.concerns((d, "ar")) for c in setting.cautions) else ""
        vs_ar = "—" if gain is None else f"{flag}{100 * gain.gain:+.1f}% " + (
            f"[{100 * gain.low:+.1f}, {100 * gain.high:+.1f}]" if gain.has_interval else "(no interval)")
        tree = f"{st.rounds.mean_tree_size:.1f}" if st.rounds.mean_tree_size else "—"
        print(f"{d:<11}{st.decodes:>8}{st.tokens.sum():>8.0f}{st.seconds.sum():>9.2f}{st.speed:>8.1f}  "
              f"{vs_ar:<24}{st.rounds.tau:>6.2f}{st.tokens_per_pass:>9.2f}{tree:>6}  {st.acceptance_text()}")
    print("tau: tokens per round, the bonus token included; tok/pass: per target pass after the prefill "
          "(root-pass rules make two a round)")
    if any("chains" in st.acceptance_text() for st in setting.decoders.values()):
        print(f"acceptance by depth beyond the pool's depth ({pool.depth}): only context lookup's chains reach there")
    copied = {d: c for d, st in setting.decoders.items() if (c := st.copied_summary())}
    if copied:
        print("context lookup: accepted tokens that only a chain copied from the context proposed: " + ", ".join(
            f"{d} {c['copied']} ({100 * c['copied_share']:.0f}%)" for d, c in copied.items()))
    for c in setting.cautions:
        print(f"⚠ {c.kind}: {c.message}")
    if any(not g.has_interval for g in setting.gains.values()):
        print(f"no interval: a paired-bootstrap interval needs at least {MIN_INTERVAL_PROMPTS} prompts (from "
              f"fewer it is about the range of their gains)")
    if (found := verdict_of(setting)) is not None:
        target = (header.get("models") or {}).get("target")
        device = (target.get("device") if isinstance(target, dict) else None) or "cpu"
        print("\n".join(verdict_lines(found, budget=setting.budget,
                                       machine=device_words(header.get("environment") or {}, device),
                                       drafter=drafter_name(header),
                                       loaded=any(c.kind == "load" for c in setting.cautions), measured=measured)))


if __name__ == "__main__":
    sys.exit(main())
