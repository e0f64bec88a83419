"""vLLM's offline API over a pair: `LLM`, `SamplingParams` (launch.sampling_params) and `RequestOutput`, so that a
script written for vLLM runs here with its import line changed (docs/api.md shows vLLM's quickstart so). It builds on
launch.api's `Pair`. The runtime's own settings (the decoder, the tree budget) are keyword-only arguments of `LLM`
and of each call. What vLLM names but the runtime cannot do is refused by name with a ConfigError, never ignored,
except IGNORED_LLM (which changes nothing here) and the penalties (said in a logged line not to apply). docs/api.md
lists every name side by side."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from evaluation.output import DecodeMetrics, DecodeOutput
from evaluation.record import DecodeRecord
from launch.pair_api import Pair, check_present_as
from launch.sampling_params import SamplingParams
from models.options import DEFAULT_DRAFTER, EMBEDDED, HEAD_PREFIX, ModelOptions
from pipeline.config import ConfigError, is_int
from pipeline.metrics import tokens_per_pass
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from programs.cli import Stderr
from programs.progress import Progress
from target_proc.conversation import ROLES
from target_proc.stops import StopStrings

# The runtime's own decode settings (DecodeConfig's fields that SamplingParams has no name for).
RUNTIME = ("budget", "budget_max", "budget_prior", "lend_cores", "cut_pools", "cut_weigh", "ahead", "drafter_window",
           "lookup")
# vLLM's LLM arguments that change nothing here at any value: memory and logging hints (the caches are sized by
# `max_model_len`, the target's max_context).
IGNORED_LLM = ("gpu_memory_utilization", "swap_space", "disable_log_stats")
# vLLM's LLM arguments accepted at the value that changes nothing here, refused at any other.
NEUTRAL_LLM = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "trust_remote_code": False,
               "tokenizer": None, "tokenizer_mode": "auto", "quantization": None}
PAIR_ARGUMENTS = ("pool", "target_options", "drafter_options", "target_process", "drafter_timeout",
                  "ready_timeout", "log_level")
# vLLM's speculative_config keys taken here, and its methods: a drafter model, or an EAGLE head (eagle3:PATH).
SPECULATIVE_KEYS = ("model", "method", "num_speculative_tokens")
SPECULATIVE_METHODS = (None, "draft_model", "eagle", "eagle3")
LOG = logging.getLogger("specpair")  # the layer's lines, at INFO on stderr as vLLM's own logger writes them


@dataclass(frozen=True, slots=True)
class Logprob:
    """vLLM's Logprob: a token's log-probability under the target, its rank in the target's row (1: the most
    likely) and its text."""

    logprob: float
    rank: int
    decoded_token: str


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """vLLM's CompletionOutput: one output of a request (index i of its n)."""

    index: int
    text: str
    token_ids: list[int]  # ending with the stop token id or end-of-sequence token that ended it, if one did
    cumulative_logprob: float | None  # the sum of `logprobs`' chosen tokens' (None: none were asked for)
    logprobs: list[dict[int, Logprob]] | None  # per token: the chosen token's and the top `logprobs` tokens'
    finish_reason: str | None  # "stop" or "length"; None while a stream is under way
    stop_reason: str | int | None  # the stop string or stop token id that matched, else None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """vLLM's request metrics (Unix times) and the runtime's own figures of the decode (the first output's)."""

    arrival_time: float  # when the call took the request
    first_token_time: float | None  # when the first output tokens were committed
    last_token_time: float | None
    finished_time: float | None
    time_to_first_token: float | None  # first_token_time - arrival_time, seconds
    decoder: str
    tokens_per_second: float | None = None  # output tokens over the decode's time (the prefill included)
    tokens_per_target_pass: float | None = None  # after the prefill (a root-pass rule makes two a round)
    tau: float | None = None  # tokens per round, the bonus token included
    rounds: int | None = None
    target_passes: int | None = None
    mean_tree_size: float | None = None  # nodes verified per round that ran a tree pass
    tree_sizes: tuple[int, ...] = ()  # per round (0: a plain round)
    acceptance: tuple[float, ...] = ()  # by depth
    decode: DecodeMetrics | None = field(default=None, repr=False)  # all of them, evaluation.output's


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """vLLM's RequestOutput: one prompt's request, its outputs and metrics; `decode_outputs` are the pair's own
    DecodeOutputs, one per output (their `.record` the command line's records; with `best_of`, every decode),
    `decode_output` the first; empty while a stream is under way."""

    request_id: str
    prompt: str | None  # the text given (for chat, the templated text); None for token ids
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    decode_outputs: list[DecodeOutput] = field(default_factory=list, repr=False)

    @property
    def decode_output(self) -> DecodeOutput | None:
        return self.decode_outputs[0] if self.decode_outputs else None

    @property
    def prompt_logprobs(self) -> None:
        return None


class LLM:
    """vLLM's `LLM` over a pair: `LLM()` the embedded default pair, `LLM(model)` a model decoding plainly (`ar`) with
    no drafter process beside it, as vLLM's does, `LLM(model, drafter=...)` or vLLM's `speculative_config` a pair
    decoding speculatively; `decoder` and the runtime's settings (RUNTIME) apply to every call that names none;
    `pool`, `target_options`, ... (PAIR_ARGUMENTS) go to the Pair. vLLM's `dtype`, `max_model_len`, `enforce_eager`
    and `seed` become the models' dtype, the target's max_context, CUDA graphs off and the seed of the fresh seeds
    that parameters whose seed is None take; `allow_download` lets a model missing here download."""

    def __init__(self, model: str = EMBEDDED, *positional, drafter: str | None = None, decoder: str | None = None,
                 speculative_config: dict | None = None, dtype: str | None = None, max_model_len: int | None = None,
                 enforce_eager: bool = False, seed: int | None = 0, allow_download: bool = False,
                 **arguments) -> None:
        if positional:  # vLLM's older LLM took its tokenizer second: a drafter here is named, never positional
            raise ConfigError("drafter", f"and every argument after `model` are keyword arguments, got "
                                         f"{len(positional)} more positional")
        runtime, pair_arguments = _split_arguments(arguments)
        drafter, budget = _speculative(speculative_config, drafter)
        runtime = {"budget": budget, **runtime} if budget is not None else runtime
        for name, spec in (("model", model), ("drafter", drafter)):
            if not (isinstance(spec, str) and spec) and not (name == "drafter" and spec is None):
                raise ConfigError(name, f"must be a model spec as `Pair` takes it (text), got {spec!r}")
        drafted = drafter is not None or model == EMBEDDED  # else no drafter starts: plain decoding, as vLLM's
        decoder = decoder or ("root-draw" if drafted else "ar")
        DecodeConfig(decoder, **runtime)  # checked before anything starts
        if not drafted and RULES[decoder].select is not None:
            raise ConfigError("decoder", f"{decoder!r} needs a drafter: name one with `drafter` or "
                                         f"`speculative_config` (without, the model decodes plainly, `ar`)")
        if not (seed is None or (is_int(seed) and seed >= 0)):
            raise ConfigError("seed", f"must be None or a whole number >= 0, got {seed!r}")
        for name, value in (("enforce_eager", enforce_eager), ("allow_download", allow_download)):
            if not isinstance(value, bool):
                raise ConfigError(name, f"must be True or False, got {value!r}")
        self.decoder, self.runtime, self.seed = decoder, runtime, seed
        self._seeds = random.Random(seed)  # the fresh seeds of parameters whose seed is None, as vLLM draws them
        target_options, drafter_options = _model_options(pair_arguments, dtype, max_model_len, enforce_eager,
                                                         allow_download)
        for spec, options in ((model, target_options), (drafter, drafter_options)):
            if spec is not None:  # a model missing here named before anything starts, with this API's argument
                check_present_as(ModelOptions(spec, **options), "`allow_download=True`")
        shown = drafter or (DEFAULT_DRAFTER if drafted else "none")  # as Pair chooses it
        _say(logging.INFO, f"starting the pair: target {model}, drafter {shown}, decoder {decoder} (loading the "
                           f"models may take a while)")
        t0 = time.perf_counter()
        self.pair = Pair(model, drafter if drafted else False, target_options=target_options,
                         drafter_options=drafter_options if drafted else None, **pair_arguments)
        _say(logging.INFO, f"the pair is ready ({time.perf_counter() - t0:.1f} s)")
        self._tokenizer = None
        self._counter = itertools.count()

    def get_tokenizer(self):
        """The target's tokenizer: the transformers tokenizer for a checkpoint, the mock's for mock models."""
        tokenizer = self._project_tokenizer()
        return getattr(tokenizer, "tok", tokenizer)

    def generate(self, prompts, sampling_params=None, *, use_tqdm: bool = True, decoder: str | None = None,
                 **runtime) -> list[RequestOutput]:
        """vLLM's `generate`: prompts (a text, read as raw text with no chat template, `{"prompt": text}`,
        `{"prompt_token_ids": [...]}`, or a list of them) -> a RequestOutput each, in order, with one progress
        bar on stderr (`use_tqdm=False`: none). Every prompt and parameter is checked before the first decode."""
        given = _prompt_list(prompts)
        params = SamplingParams.of(sampling_params, len(given))
        requests = []
        for p in given:
            shown, ids = self._prompt(p)
            requests.append((shown, ids, ids))
        return self._decode_all(requests, params, decoder, runtime, use_tqdm)

    def chat(self, messages, sampling_params=None, *, use_tqdm: bool = True, decoder: str | None = None,
             chat_template: None = None, add_generation_prompt: bool = True, **runtime) -> list[RequestOutput]:
        """vLLM's `chat`: one conversation (a list of {"role", "content"} messages, system, user and assistant, the last
        the user's) or a list of them, each through the target's chat template -> a RequestOutput each."""
        if chat_template is not None:
            raise ConfigError("chat_template", "is not supported: the target's own chat template applies")
        if add_generation_prompt is not True:
            raise ConfigError("add_generation_prompt", "must be True: a chat decode answers the user's message")
        conversations = _conversations(messages)
        params = SamplingParams.of(sampling_params, len(conversations))
        requests = [(None, c, self._project_tokenizer().message_ids(c)) for c in conversations]
        return self._decode_all(requests, params, decoder, runtime, use_tqdm)

    def stream(self, prompt, sampling_params=None, *, decoder: str | None = None,
               **runtime) -> Iterator[RequestOutput]:
        """One prompt as `generate` takes it, streamed as vLLM's engine streams: a RequestOutput as each round
        commits tokens, each holding the whole output so far (`finished` False), the last the finished output.
        Leaving the loop early stops the decode at its next round."""
        if not isinstance(prompt, (str, dict)):
            raise ConfigError("prompt", f"must be one text or one {{'prompt': ...}} or {{'prompt_token_ids': [...]}} "
                                        f"dict, got {type(prompt).__name__}")
        (given,) = _prompt_list(prompt)
        (params,) = SamplingParams.of(sampling_params, 1)
        if params.decodes > 1:
            raise ConfigError("n", f"must be 1 in a stream (one output streamed), got {params.decodes}: `generate` "
                                   f"takes n and best_of")
        shown, ids = self._prompt(given)
        (config,) = self._plan(params, len(ids), decoder, runtime)
        _say_unapplied([params])
        request_id, arrival, first = str(next(self._counter)), time.time(), None
        token_ids, text = [], ""
        for chunk in self.pair.stream(ids, config.decoder, logprobs=params.logprobs, **_settings(config)):
            if chunk.finished:
                yield self._output(request_id, shown, [chunk.output], params, arrival, first)
                return
            if chunk.token_ids:
                first = first or time.time()
                token_ids += chunk.token_ids
                text += chunk.text
                partial = CompletionOutput(0, text, list(token_ids), None, None, None, None)
                metrics = RequestMetrics(arrival, first, time.time(), None, first - arrival, config.decoder)
                yield RequestOutput(request_id, shown, list(ids), [partial], False, metrics)

    def close(self) -> None:
        """Shut the pair down (as `Pair.close`); the interpreter's exit does it too."""
        self.pair.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _plan(self, params: SamplingParams, prompt_tokens: int, decoder: str | None,
              runtime: dict) -> list[DecodeConfig]:
        """A request's decodes: one DecodeConfig per output (`best_of` of them, else `n`), seeded `seed + i`, or
        with fresh seeds where `seed` is None, as vLLM seeds a request's outputs."""
        if unknown := [name for name in runtime if name not in RUNTIME]:
            raise ConfigError(unknown[0], f"is not a decode setting here; the runtime's are decoder, "
                                          f"{', '.join(RUNTIME)}; vLLM's go in `sampling_params`")
        settings, decoder = {**self.runtime, **runtime}, decoder or self.decoder
        limit = params.max_tokens or _room(params.decode_config(decoder, 0, 1, **settings), prompt_tokens,
                                           self.pair.target_options.max_context)
        seeds = [params.seed + i if params.seed is not None else self._seeds.randrange(2 ** 32)
                 for i in range(params.decodes)]
        return [params.decode_config(decoder, seed, limit, **settings) for seed in seeds]

    def _prompt(self, prompt) -> tuple[str | None, list[int]]:
        """A prompt as `generate` takes it -> (its text or None, its token ids)."""
        tokenizer = self._project_tokenizer()
        if isinstance(prompt, str) or "prompt" in prompt:
            text = prompt if isinstance(prompt, str) else prompt["prompt"]
            return text, tokenizer.text_ids(text)
        ids = [int(t) for t in prompt["prompt_token_ids"]]
        vocab = len(tokenizer.tok) if hasattr(tokenizer, "tok") else tokenizer.vocab_size
        if bad := [t for t in ids if t >= vocab]:  # as vLLM, against the tokenizer's vocabulary
            raise ConfigError("prompts", f"'prompt_token_ids' holds {bad[0]}, outside the tokenizer's vocabulary "
                                         f"[0, {vocab})")
        return None, ids

    def _decode_all(self, requests: list[tuple[str | None, list, list[int]]], params: list[SamplingParams],
                    decoder: str | None, runtime: dict, use_tqdm: bool) -> list[RequestOutput]:
        """(shown prompt or None, token ids or messages, token ids) decoded one after another with one bar, each
        request's decodes planned (and so checked) before the first runs."""
        plans = [self._plan(p, len(ids), decoder, runtime) for (_, _, ids), p in zip(requests, params)]
        _say_unapplied(params)
        outputs = []
        with Progress(len(requests), bar=use_tqdm) as progress:
            with progress.aside():  # budget auto's one-time pass timing, out of the time left
                self.pair.time_passes(c for configs in plans for c in configs)
            for (shown, prompt, _), p, configs in zip(requests, params, plans):
                request_id, arrival = str(next(self._counter)), time.time()
                logprobs = p.logprobs if p.logprobs is not None or p.decodes == p.n else 0  # best_of ranks by them
                outs = [self.pair.decode(prompt, c.decoder, use_tqdm=False, logprobs=logprobs, **_settings(c))
                        for c in configs]
                first = min(o.metrics.finished_time - o.metrics.seconds + _first_commit_seconds(o.record) for o in outs)
                templated = shown is None and not _are_ids(prompt)  # chat: vLLM shows the templated text
                outputs.append(self._output(request_id, outs[0].prompt if templated else shown, outs, p, arrival,
                                            first))
                progress.step()
        return outputs

    def _output(self, request_id: str, shown: str | None, outs: list[DecodeOutput], params: SamplingParams,
                arrival: float, first: float | None) -> RequestOutput:
        """A request's decodes as vLLM's output: with `best_of`, the `n` of highest cumulative log-probability."""
        completions = [_completion(i, out, params, self._project_tokenizer()) for i, out in enumerate(outs)]
        if params.decodes > params.n:
            order = sorted(range(len(outs)), key=lambda i: -completions[i].cumulative_logprob)[: params.n]
            outs = [outs[i] for i in order]
            completions = [_completion(k, out, params, self._project_tokenizer()) for k, out in enumerate(outs)]
        m = outs[0].metrics
        finished = max(o.metrics.finished_time for o in outs)
        first = first if first is not None else finished
        metrics = RequestMetrics(arrival, first, finished, finished, first - arrival, outs[0].decoder,
                                 m.tokens_per_second, tokens_per_pass(len(outs[0].token_ids), m.target_passes),
                                 m.tau, m.rounds, m.target_passes, m.mean_tree_size, m.tree_sizes, m.acceptance, m)
        return RequestOutput(request_id, shown, list(outs[0].prompt_token_ids or []), completions, True, metrics,
                             outs)

    def _project_tokenizer(self):
        """The pair's tokenizer (models.tokenizers): the in-process target's, or loaded here once when the
        target runs in a process of its own."""
        if self._tokenizer is None:
            if self.pair.session is not None:
                self._tokenizer = self.pair.session.tokenizer
            else:
                from models.load import load_tokenizer

                self._tokenizer = load_tokenizer(self.pair.target_options)
        return self._tokenizer


def _room(config: DecodeConfig, prompt_tokens: int, max_context: int) -> int:
    """`max_tokens=None`: the most new tokens the target's cache holds after this prompt (and a round's tree), as
    vLLM's is the context's limit less the prompt."""
    room = max_context - config.kv_slots(prompt_tokens)
    if room < 0:
        raise ConfigError("max_tokens", f"None leaves no room: a prompt of {prompt_tokens} tokens fills "
                                        f"max_model_len {max_context} (with a round's tree of {config.largest_tree})")
    return 1 + room


def _say_unapplied(params: list[SamplingParams]) -> None:
    """One logged line for the penalties a call's parameters give that the runtime does not apply."""
    if unapplied := sorted({name for p in params for name in p.unapplied()}):
        _say(logging.WARNING, f"{', '.join(unapplied)} not applied: the runtime samples the target's law as it is, "
                              f"so these outputs decode as with the penalties at their neutral values")


def _completion(index: int, out: DecodeOutput, params: SamplingParams, tokenizer) -> CompletionOutput:
    """One decode as vLLM's CompletionOutput; its cumulative log-probability wherever the record keeps them."""
    kept = out.record.logprobs
    cumulative = None if kept is None else sum(entry[0][1] for entry in kept)
    logprobs = None if params.logprobs is None or kept is None else [  # per token: the chosen one, the top ones
        {int(t): Logprob(float(lp), int(r), tokenizer.decode([int(t)])) for t, lp, r in entry[: 1 + params.logprobs]}
        for entry in kept]
    return CompletionOutput(index, _text(out, params, tokenizer), list(out.token_ids), cumulative, logprobs,
                            out.finish_reason, out.stop_reason)


def _text(out: DecodeOutput, params: SamplingParams, tokenizer) -> str:
    """The output's text as `params` ask for it: the pair's (vLLM's defaults) unless the stop's text is kept or
    special tokens shown, then decoded again from the ids."""
    if not params.include_stop_str_in_output and params.skip_special_tokens:
        return out.text
    ids = out.token_ids
    if out.finish_reason == "stop" and not isinstance(out.stop_reason, str) and not params.include_stop_str_in_output:
        ids = ids[:-1]  # a stop token id or end-of-sequence token: its text left out, as vLLM leaves it
    text = tokenizer.decode(ids) if params.skip_special_tokens else tokenizer.prompt_text(ids)
    if isinstance(out.stop_reason, str) and (found := StopStrings(tokenizer, params.stop).first(text)):
        at, string = found
        text = text[: at + (len(string) if params.include_stop_str_in_output else 0)]
    return text


def _split_arguments(arguments: dict) -> tuple[dict, dict]:
    """LLM's keyword arguments -> (the runtime's decode settings, Pair's arguments); vLLM's that mean nothing
    here dropped (IGNORED_LLM) or checked neutral (NEUTRAL_LLM), any other refused by name."""
    runtime, pair = {}, {}
    for name, value in arguments.items():
        if name in RUNTIME:
            runtime[name] = value
        elif name in PAIR_ARGUMENTS:
            pair[name] = value
        elif name in NEUTRAL_LLM:
            if value != NEUTRAL_LLM[name]:
                raise ConfigError(name, f"is not supported here: only {NEUTRAL_LLM[name]!r} is accepted, got "
                                        f"{value!r}")
        elif name not in IGNORED_LLM:
            raise ConfigError(name, f"is not an argument here; besides model and drafter they are decoder, "
                                    f"speculative_config, dtype, max_model_len, enforce_eager, seed, allow_download, "
                                    f"{', '.join(RUNTIME + PAIR_ARGUMENTS)}")
    return runtime, pair


def _speculative(config, drafter: str | None) -> tuple[str | None, int | None]:
    """vLLM's `speculative_config` ({"model", "method", "num_speculative_tokens"}) -> (the drafter's spec, the
    tree budget: vLLM's draft tokens a round); without one, (`drafter`, None)."""
    if config is None:
        return drafter, None
    if not isinstance(config, dict) or not isinstance(config.get("model"), str) or not config["model"]:
        raise ConfigError("speculative_config", f"must be a dict with the drafter's 'model' (a model spec), got "
                                                f"{config!r:.80}")
    if unknown := sorted(set(config) - set(SPECULATIVE_KEYS)):
        raise ConfigError("speculative_config", f"holds {unknown[0]!r}; the keys taken here are "
                                                f"{', '.join(SPECULATIVE_KEYS)}")
    if drafter is not None:
        raise ConfigError("speculative_config", "and `drafter` both name a drafter: give one")
    method = config.get("method")
    if method not in SPECULATIVE_METHODS:
        raise ConfigError("speculative_config", f"'method' must be one of "
                                                f"{', '.join(map(str, SPECULATIVE_METHODS))}, got {method!r}")
    tokens = config.get("num_speculative_tokens")
    if not (tokens is None or (is_int(tokens) and tokens >= 1)):
        raise ConfigError("speculative_config", f"'num_speculative_tokens' must be a whole number >= 1, got "
                                                f"{tokens!r}")
    model = config["model"]
    if method in ("eagle", "eagle3") and not model.startswith(HEAD_PREFIX):
        model = HEAD_PREFIX + model  # an EAGLE head, as --drafter names one
    return model, tokens


def _model_options(pair_arguments: dict, dtype: str | None, max_model_len: int | None, enforce_eager: bool,
                   allow_download: bool) -> tuple[dict, dict]:
    """The target's and the drafter's model options: those given to Pair, with vLLM's `dtype`, `max_model_len`
    and `enforce_eager` and `allow_download` put in (taken from `pair_arguments`)."""
    if not (max_model_len is None or (is_int(max_model_len) and max_model_len >= 1)):
        raise ConfigError("max_model_len", f"must be None or a whole number >= 1, got {max_model_len!r}")
    target_options = dict(pair_arguments.pop("target_options", None) or {})
    drafter_options = dict(pair_arguments.pop("drafter_options", None) or {})
    for options in (target_options, drafter_options):
        options.update({"dtype": dtype} if dtype is not None else {})
        options.update({"graphs": False} if enforce_eager else {})
        options.update({"allow_download": True} if allow_download else {})
    if max_model_len is not None:
        target_options["max_context"] = max_model_len
    for name, options in (("target_options", target_options), ("drafter_options", drafter_options)):
        if unknown := sorted(set(options) - {f.name for f in dataclasses.fields(ModelOptions)}):
            raise ConfigError(name, f"holds {unknown[0]!r}, not a model option")
    return target_options, drafter_options


def _say(level: int, message: str) -> None:
    """A line of the layer's on stderr, as vLLM's logger writes its own (its handler set up at the first)."""
    if not LOG.handlers:
        handler = Stderr()
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s", "%m-%d %H:%M:%S"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
        LOG.propagate = False
    LOG.log(level, message)


def _settings(config: DecodeConfig) -> dict:
    """A DecodeConfig as Pair's keyword settings."""
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "decoder"}


def _prompt_list(prompts) -> list:
    """`prompts` as `generate` takes them -> a list of checked prompts (texts and dicts)."""
    if isinstance(prompts, (str, dict)):
        return _one_prompt([prompts])
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ConfigError("prompts", f"must be a text, a {{'prompt': ...}} or {{'prompt_token_ids': [...]}} dict, or "
                                     f"a non-empty list of them, got {type(prompts).__name__}")
    if all(is_int(t) for t in prompts):
        raise ConfigError("prompts", "holds token ids: give them as {'prompt_token_ids': [...]}")
    return _one_prompt(list(prompts))


def _one_prompt(prompts: list) -> list:
    for i, p in enumerate(prompts):
        where = f"prompt {i}" if len(prompts) > 1 else "prompt"
        if isinstance(p, str):
            if not p:
                raise ConfigError("prompts", f"{where} is empty")
        elif isinstance(p, dict):
            if len(p) != 1 or next(iter(p)) not in ("prompt", "prompt_token_ids"):
                raise ConfigError("prompts", f"{where} must hold one key, 'prompt' or 'prompt_token_ids', got "
                                             f"{sorted(map(str, p))}")
            value = next(iter(p.values()))
            if "prompt" in p and not (isinstance(value, str) and value):
                raise ConfigError("prompts", f"{where}'s 'prompt' must be non-empty text")
            if "prompt_token_ids" in p and not (isinstance(value, (list, tuple)) and value
                                                and all(is_int(t) and t >= 0 for t in value)):
                raise ConfigError("prompts", f"{where}'s 'prompt_token_ids' must be a non-empty list of token ids")
        else:
            raise ConfigError("prompts", f"{where} must be a text or a dict, got {type(p).__name__}")
    return prompts


def _conversations(messages) -> list[list[dict]]:
    """`messages` as `chat` takes them -> a list of checked conversations."""
    if isinstance(messages, (list, tuple)) and messages and all(isinstance(m, dict) for m in messages):
        conversations = [list(messages)]
    elif isinstance(messages, (list, tuple)) and messages and all(isinstance(c, (list, tuple)) for c in messages):
        conversations = [list(c) for c in messages]
    else:
        raise ConfigError("messages", "must be a list of {'role', 'content'} messages or a list of such lists")
    for k, conversation in enumerate(conversations):
        where = f"conversation {k}" if len(conversations) > 1 else "the conversation"
        for i, m in enumerate(conversation):
            if not (isinstance(m, dict) and m.keys() == {"role", "content"} and m["role"] in ROLES
                    and isinstance(m["content"], str)):
                raise ConfigError("messages", f"{where}'s message {i} must be {{'role': {'|'.join(ROLES)}, "
                                              f"'content': text}}, got {m!r:.80}")
        if not conversation or conversation[-1]["role"] != "user":
            raise ConfigError("messages", f"{where} must end with the user's message: the decode answers it")
    return conversations


def _are_ids(prompt) -> bool:
    return isinstance(prompt, list) and all(is_int(t) for t in prompt)


def _first_commit_seconds(record: DecodeRecord) -> float:
    """Seconds from a decode's start to its first commit, by its own clocks: the prefill and the first round's
    phases (the whole decode when it ran no round)."""
    if not record.rounds or not record.phases:
        return record.seconds
    return record.prefill_seconds + sum(times[0] for times in record.phases.values())
