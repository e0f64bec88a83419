"""The Python API's pair (launch.api re-exports it): start a pair, decode prompts with any decoder and settings, get
vLLM-shaped outputs (docs/api.md: an example, the outputs, settings, stops, and how the children stop with the pair).
The drafter runs in a process of its own (`drafter=False`: none); the target in the caller's process or, with
`target_process=True`, in its own. Importing this module starts nothing and changes nothing process-wide."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from evaluation.output import DecodeOutput, StreamChunk
from evaluation.record import DecodeRecord
from models.options import DEFAULT_DRAFTER, EMBEDDED, ModelOptions, for_target
from pipeline.config import ConfigError, InputError, PoolConfig, is_int
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from launch.children import PY, Children, drafter_command
from launch.targets import InProcessTarget, ProcessTarget
from programs.cli import to_argv
from programs.progress import Progress

PROJECT = Path(__file__).resolve().parent.parent
CLOSE_WAIT_S = 10.0  # how long close() waits for the children to exit on their own before stopping them
GONE_WAIT_S = 10.0  # after a failed start, how long to wait for a drafter that is exiting, to name its status


Prompt = str | Sequence[int] | Sequence[dict]  # one prompt: a user turn's text, token ids or chat messages


def summarize(outputs: Sequence[DecodeOutput | DecodeRecord], *, temperature: float | None = None, budget=None) -> dict:
    """The command line's summary of one setting's outputs (or records): speeds, τ, acceptance by depth, tree
    sizes, every decoder's speedup over `ar` with its paired interval over prompts, and the cautions that say
    when a gain measures the machine rather than speculation. Outputs of several settings (temperature,
    budget) need the setting named; `settings(outputs)` lists them."""
    from evaluation.summary import analyse, as_json

    records = _records(outputs)
    present = settings(records)
    if not present:
        raise InputError("`outputs` is empty: there is nothing to summarize")
    chosen = [(t, b) for t, b in present if temperature in (None, t) and budget in (None, b)]
    if len(chosen) != 1:
        listed = "; ".join(f"temperature={t:g}, budget={b}" for t, b in present)
        raise InputError(f"`outputs` hold {'no' if not chosen else 'several'} matching settings ({listed}): "
                         f"name one with `temperature` and `budget`")
    (t, b), = chosen
    return as_json(analyse(records, t, b, speed_tokens="output"))


def settings(outputs: Sequence[DecodeOutput | DecodeRecord]) -> list[tuple[float, int | str]]:
    """The (temperature, budget) settings of `outputs` (or records), in their first appearance's order."""
    return list(dict.fromkeys((float(r.temperature), r.setting_budget) for r in _records(outputs)))


class PairClosed(RuntimeError):
    """A call on a pair after its close()."""


class Pair:
    """A target and its drafter process (none with `drafter=False`), ready to decode; a context manager that
    shuts them down."""

    def __init__(self, target: str = EMBEDDED, drafter: str | bool | None = None, *, pool: PoolConfig | None = None,
                 target_options: dict | None = None, drafter_options: dict | None = None,
                 target_process: bool = False, drafter_timeout: float = 60.0, ready_timeout: float = 600.0,
                 log_level: str = "WARNING") -> None:
        """target, drafter: model specs as --target and --drafter take them (the drafter defaults to the target's int8
        copy for the embedded model, and to the target's spec otherwise; False: none, the target alone decodes plainly,
        `ar`); *_options: other ModelOptions fields for each side (device, dtype, threads, max_context, ...)."""
        from programs.options import ConnectOptions
        from protocol.transport import private_ipc_endpoint, remove_stale_private_dirs

        _check_spec("target", target)
        if drafter not in (None, False):
            _check_spec("drafter", drafter)
        if drafter is False and drafter_options:
            raise ConfigError("drafter_options", "are a drafter's, and `drafter=False` starts none")
        self.target_options = _model_options("target_options", target, target_options)
        self.drafter_options = None if drafter is False else for_target(_model_options(
            "drafter_options", drafter or (DEFAULT_DRAFTER if target == EMBEDDED else target), drafter_options), target)
        self.pool = _pool(pool) or default_pool(self.target_options, self.drafter_options)
        self.connect = ConnectOptions(drafter_timeout, ready_timeout)
        self.log_level = _log_level(log_level)
        remove_stale_private_dirs()  # those of earlier callers killed before they could remove theirs
        self.endpoint = private_ipc_endpoint(owner=os.getpid())
        self._stack = contextlib.ExitStack()
        # Their own process group: a terminal's Ctrl-C reaches the caller alone, which then decides.
        self._children = Children(os.path.dirname(self.endpoint[len("ipc://"):]), own_group=True)
        # Never holds self. At exit it runs while the interpreter is whole: the in-process target's session (its
        # socket) is closed then, not in the interpreter's teardown, where closing it fails on imports.
        self._finalizer = weakref.finalize(self, _stop, self._children, 0.0, self._stack)
        self._closed = False
        self.session = None  # the in-process target's TargetSession
        self._target: InProcessTarget | ProcessTarget | None = None  # what answers requests (launch.targets)
        try:
            self._start(target_process)
        except BaseException:
            self.close()
            raise

    def _start(self, target_process: bool) -> None:
        if self.drafter_options is None:  # no drafter process: the target alone, one model's memory
            return self._start_target(target_process)
        drafter = drafter_command(self.drafter_options, self.endpoint, self.target_options.max_context,
                                  self.log_level)
        self._drafter = self._children.start(drafter, self.drafter_options.process_env(), cwd=PROJECT,
                                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._drafter_log = StderrTail(self._drafter.stderr)
        self._wait_for_drafter()
        try:
            self._start_target(target_process)
        except Exception:
            if status := _exit_status(self._drafter, GONE_WAIT_S):  # a drafter that failed: the cause, say so
                raise RuntimeError(self._drafter_failed(status)) from None
            raise

    def _drafter_failed(self, status: int) -> str:
        """What a drafter that exited before it was ready said last (its error), with its exit status."""
        self._drafter_log.wait(GONE_WAIT_S)
        cause = self._drafter_log.last or "it said nothing"
        return f"the drafter process exited with status {status} before it was ready: {cause}"

    def _start_target(self, target_process: bool) -> None:
        if target_process:
            argv = [*PY, "programs.target_program", *to_argv(self.target_options), "--endpoint", self.endpoint,
                    *to_argv(self.pool, prefix="pool-"), *to_argv(self.connect), "--serve", "--log-level",
                    self.log_level, *(["--no-drafter"] if self.drafter_options is None else [])]
            proc = self._children.start(argv, self.target_options.process_env(), cwd=PROJECT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
            self._target = ProcessTarget(proc)
            self.models = self._target.ready()
        else:
            from target_proc.session import open_session

            endpoint = self.endpoint if self.drafter_options else None  # None: no drafter
            self.session = self._stack.enter_context(open_session(
                self.target_options, endpoint, self.pool, self.connect.drafter_timeout, self.connect.ready_timeout))
            self._target = InProcessTarget(self.session)
            self.models = self.session.models

    def _wait_for_drafter(self) -> None:
        """Until the drafter has bound its socket (it does before loading its model); a drafter that exits
        first is reported at once, and one that exits while loading when the target finds it gone."""
        socket_path, drafter = self.endpoint[len("ipc://"):], self._drafter
        deadline = time.monotonic() + self.connect.ready_timeout
        while not os.path.exists(socket_path):
            if drafter.poll() is not None:
                raise RuntimeError(self._drafter_failed(drafter.returncode))
            if time.monotonic() > deadline:
                raise TimeoutError(f"the drafter was not ready within {self.connect.ready_timeout:g} s "
                                   f"(raise `ready_timeout` if it is only slow)")
            time.sleep(0.05)

    def decode(self, prompt: Prompt | Sequence[Prompt], decoder: str = "root-draw", *, prompt_id: str | None = None,
               category: str = "api", use_tqdm: bool = True, **settings) -> DecodeOutput | list[DecodeOutput]:
        """One decode -> its DecodeOutput; a list of prompts -> each decoded, a list of outputs (as vLLM's
        `generate`), with a progress bar on stderr unless `use_tqdm` is False. A prompt is one user turn's text
        (through the chat template), token ids (used as they are), or chat messages [{"role": "system" | "user"
        | "assistant", "content": ...}, ...] ending with the user's. `prompt_id` names a single prompt (it seeds
        the sampling streams; derived from the prompt by default). `logprobs=k`: see _with_logprobs."""
        if not _is_many(prompt):
            (record,) = self._run(self._request(prompt, decoder, prompt_id, category, settings))
            return DecodeOutput.of(record)
        if prompt_id is not None:
            raise InputError("`prompt_id` names one prompt; a list of prompts takes ids derived from each")
        requests = [self._request(p, decoder, None, category, settings) for p in prompt]  # all checked first
        return self._run_all(requests, use_tqdm)

    def chat(self, turns: Sequence[str], decoder: str = "root-draw", *, prompt_id: str | None = None,
             category: str = "api", **settings) -> list[DecodeOutput]:
        """The user turns of one conversation, each answered with the earlier answers in context -> an output
        per turn. prompt_id seeds the sampling streams; by default it is derived from the text."""
        if isinstance(turns, str) or not turns or not all(isinstance(t, str) and t for t in turns):
            raise InputError("`turns` must be a list of non-empty strings")
        return [DecodeOutput.of(r) for r in self._run(self._request(list(turns), decoder, prompt_id, category,
                                                                    settings))]

    def stream(self, prompt: Prompt, decoder: str = "root-draw", *, prompt_id: str | None = None,
               category: str = "api", **settings) -> Iterator[StreamChunk]:
        """One decode, as `decode` takes it, streamed: a StreamChunk as each round commits tokens (the text they add),
        the last one carrying the DecodeOutput. Leaving the loop early stops the decode at its next round."""
        request = {**self._request(prompt, decoder, prompt_id, category, settings), "stream": True}
        for line in self._target.lines(request):
            if line["kind"] == "tokens":
                yield StreamChunk(line["tokens"], line["text"])
            elif line["kind"] == "decode":
                yield StreamChunk([], "", DecodeOutput.of(DecodeRecord.from_json(line, "the target's answer")))

    def decode_many(self, prompts: Iterable[Prompt], decoders: str | Sequence[str] = ("ar", "root-draw"), *,
                    use_tqdm: bool = True, **settings) -> list[DecodeOutput]:
        """Every prompt with every decoder (decoders innermost, as the command line orders them), with one
        progress bar; `decoders` may be one name or a comma-separated list, as --decoders takes it."""
        if isinstance(decoders, str):
            decoders = [d.strip() for d in decoders.split(",") if d.strip()]
        if not isinstance(decoders, Sequence) or not decoders or not all(isinstance(d, str) for d in decoders):
            raise ConfigError("decoders", f"must name at least one decoder (a name, a comma-separated list or a "
                                          f"list of names), got {decoders!r}")
        prompts = [prompts] if not _is_many(prompts) else list(prompts)
        requests = [self._request(p, d, None, "api", settings) for p in prompts for d in decoders]
        return self._run_all(requests, use_tqdm)

    summarize = staticmethod(summarize)  # as the module's: Pair.summarize(outputs)
    settings = staticmethod(settings)

    def _request(self, prompt, decoder: str, prompt_id: str | None, category: str, settings: dict) -> dict:
        self._check_open()
        return make_request(prompt, decoder, prompt_id, category, settings, self.drafter_options is not None)

    def _run(self, request: dict) -> list[DecodeRecord]:
        """One request's records, read from the answer lines that hold them."""
        return [DecodeRecord.from_json(line, "the target's answer") for line in self._target.lines(request)
                if line["kind"] == "decode"]

    def _run_all(self, requests: list[dict], use_tqdm: bool) -> list[DecodeOutput]:
        """Requests one after another, with one bar counting them -> their outputs."""
        outputs = []
        with Progress(len(requests), bar=use_tqdm) as progress:
            with progress.aside():
                self.time_passes(DecodeConfig(**r["config"]) for r in requests)
            for request in requests:
                outputs += [DecodeOutput.of(r) for r in self._run(request)]
                progress.step()
        return outputs

    def time_passes(self, configs: Iterable[DecodeConfig]) -> None:
        """Budget auto's pass timings for `configs` ready before they decode (timed once, where this machine keeps
        none), so that a run's progress keeps that wait out of its time left (Progress.aside)."""
        if caps := sorted({c.budget_max for c in configs if c.auto}):
            self._target.timings(caps)

    def _check_open(self) -> None:
        if self._closed:
            raise PairClosed("this pair is closed: start another `Pair` to decode again")

    def close(self) -> None:
        """Shut the pair down: the target first (it asks the drafter to exit), then wait for both; those
        still running after CLOSE_WAIT_S are stopped. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._stack.close()
            if isinstance(self._target, ProcessTarget) and self._target.proc.poll() is None:
                self._target.proc.stdin.close()  # end of requests: the target shuts the drafter down and exits
        finally:
            self._finalizer.detach()
            _stop(self._children, CLOSE_WAIT_S)

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_request(prompt, decoder: str, prompt_id: str | None, category: str, settings: dict, drafted: bool) -> dict:
    """A request as the target takes it: the prompt, its id (derived from it by default), the category and the checked
    settings; `drafted`: whether the pair has a drafter (a decoder that needs one is refused without)."""
    settings, asked = _with_logprobs(settings)
    config = DecodeConfig(decoder, **_settings(settings))
    if not drafted and RULES[decoder].select is not None:
        raise ConfigError("decoder", f"{decoder!r} needs a drafter, and this pair has none: it decodes plainly, `ar`")
    if isinstance(prompt, str):
        if not prompt:
            raise InputError("`prompt` must be non-empty text")
        prompt, key = [prompt], "turns"
    elif isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
        key = "turns"  # chat's user turns
    elif isinstance(prompt, (list, tuple)):
        prompt, key = list(prompt), "context"
    else:
        raise InputError(f"`prompt` must be text, token ids or chat messages, got {type(prompt).__name__}")
    raw = "\x00".join(prompt) if key == "turns" else json.dumps(prompt, default=str)
    digest = hashlib.blake2b(raw.encode(), digest_size=6).hexdigest()
    return {"id": prompt_id or f"{'text' if key == 'turns' else 'context'}/{digest}", "category": category,
            key: prompt, "config": dataclasses.asdict(config), **asked}


def _is_many(prompt) -> bool:
    """A list of prompts, not one: texts, token id lists or message lists (one prompt's items are ids or messages)."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(p, (str, list, tuple)) for p in prompt)


def _records(outputs: Sequence[DecodeOutput | DecodeRecord]) -> list[DecodeRecord]:
    if isinstance(outputs, (str, bytes, dict)) or not isinstance(outputs, Iterable):
        raise ConfigError("outputs", f"must be a list of decode outputs or records, got {type(outputs).__name__}")
    records = [o.record if isinstance(o, DecodeOutput) else o for o in outputs]
    if wrong := [r for r in records if not isinstance(r, DecodeRecord)]:
        raise ConfigError("outputs", f"must hold decode outputs or records (DecodeOutput, DecodeRecord), got a "
                                     f"{type(wrong[0]).__name__}: read saved records with DecodeRecord.from_json")
    return records


def check_present_as(options: ModelOptions, argument: str) -> None:
    """models.present's check_present, its error naming `argument`: how the caller's API lets a model that is
    not on this machine download (the command line's names a flag)."""
    from models.present import ModelNotFound, check_present

    try:
        check_present(options)
    except ModelNotFound as e:
        raise ModelNotFound(f"{str(e).removesuffix('set `allow_download`')}pass {argument}") from None


def _with_logprobs(settings: dict) -> tuple[dict, dict]:
    """A call's settings -> (the decode's settings, the request's `logprobs` entry): `logprobs=k` keeps each
    output token's log-probability under the target, from the row the verifier drew it from, with the k most
    likely tokens of that row, in the record (`out.record.logprobs`: target_proc.logprobs)."""
    settings = dict(settings)
    logprobs = settings.pop("logprobs", None)
    if not (logprobs is None or (is_int(logprobs) and logprobs >= 0)):
        raise ConfigError("logprobs", f"must be None or a whole number >= 0, got {logprobs!r}")
    return settings, {} if logprobs is None else {"logprobs": logprobs}


def _check_spec(name: str, spec) -> None:
    """A model spec is a non-empty string, as --target and --drafter take it."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(name, f"must be a model spec as text ('mock', a checkpoint folder, a model id), got "
                                f"{spec!r}")


def _model_options(name: str, model: str, options) -> ModelOptions:
    """ModelOptions for `model` with the other fields of `options` (a dict), unknown fields refused by name, and a
    model this machine lacks and may not download refused (ModelNotFound naming `name`'s allow_download)."""
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ConfigError(name, f"must be a dict of model options, got {type(options).__name__}")
    fields = [f.name for f in dataclasses.fields(ModelOptions) if f.name != "model"]
    if unknown := [key for key in options if key not in fields]:
        raise ConfigError(name, f"has {unknown[0]!r}, not a model option; the options are {', '.join(fields)}")
    made = ModelOptions(model=model, **options)
    check_present_as(made, f"`{name}={{'allow_download': True}}`")  # a model missing here, before anything starts
    return made


def _pool(pool) -> PoolConfig | None:
    """The `pool` argument: a PoolConfig, a dict of its fields (made into one), or None for the default."""
    if pool is None or isinstance(pool, PoolConfig):
        return pool
    if not isinstance(pool, dict):
        raise ConfigError("pool", f"must be a PoolConfig or a dict of its fields, got {type(pool).__name__}")
    fields = [f.name for f in dataclasses.fields(PoolConfig)]
    if unknown := [key for key in pool if key not in fields]:
        raise ConfigError("pool", f"has {unknown[0]!r}, not a pool field; the fields are {', '.join(fields)}")
    return PoolConfig(**pool)


def _log_level(level) -> str:
    """A log level's name as the programs' --log-level takes it, in capitals."""
    from programs.cli import LOG_LEVELS

    if not isinstance(level, str) or level.upper() not in LOG_LEVELS:
        raise ConfigError("log_level", f"must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level.upper()


class StderrTail:
    """A child's stderr passed on to ours line by line, its last non-empty line kept: the cause a child that
    failed gives (its error), to name in what the caller is told."""

    def __init__(self, stream) -> None:
        self.last = ""
        self._thread = threading.Thread(target=self._pass_on, args=(stream,), daemon=True)
        self._thread.start()

    def _pass_on(self, stream) -> None:
        for raw in stream:
            line = raw.decode(errors="replace")
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):  # our stderr closed: keep reading, or the child blocks on a full pipe
                pass
            if line.strip():
                self.last = line.strip()
        stream.close()

    def wait(self, seconds: float) -> None:
        """Until the child's stderr has ended (it exited), at most `seconds`."""
        self._thread.join(seconds)


def _exit_status(proc: subprocess.Popen, wait: float) -> int | None:
    """The process's exit status if it ends within `wait` s, else None."""
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        return None


def default_pool(target: ModelOptions, drafter: ModelOptions | None = None) -> PoolConfig:
    """The command line's pool: reduced for the embedded pair on the CPU (by its drafter, the default one where
    none is given), the paper's otherwise."""
    from models.options import DEFAULT_DRAFTER, embedded_pool

    if target.model != EMBEDDED or target.device != "cpu":
        return PoolConfig()
    return embedded_pool(DEFAULT_DRAFTER if drafter is None else drafter.model)


def _settings(settings: dict) -> dict:
    """The keyword settings of a decode, unknown ones refused with the names of those accepted."""
    accepted = [f.name for f in dataclasses.fields(DecodeConfig) if f.name != "decoder"]
    if unknown := [name for name in settings if name not in accepted]:
        raise ConfigError(unknown[0], f"is not a decode setting; the settings are {', '.join(accepted)}")
    return settings


def _stop(children: Children, settle: float, session: contextlib.ExitStack | None = None) -> None:
    """Close `session` (the in-process target's: it asks the drafter to shut down), then stop the children,
    letting them exit on their own within `settle` s (launch.children). The finaliser of a pair left
    unclosed calls it with no time to settle."""
    if session is not None:
        import zmq

        from protocol.errors import PeerDied, PeerTimeout, ProtocolError

        try:
            session.close()
        except (ProtocolError, PeerDied, PeerTimeout, zmq.ZMQError) as e:  # the drafter had gone: stopped below
            logging.getLogger("api").debug("closing a pair left open: %s", e)
    children.stop(settle)
