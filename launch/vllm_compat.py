"""vLLM's offline API over a pair: `LLM`, `SamplingParams` and `RequestOutput`, so that a script written for
vLLM runs here with its import line changed.

    from launch.vllm_compat import LLM, SamplingParams

    llm = LLM()  # the embedded default pair; LLM("mock") needs no weights; LLM(target, drafter=...) any pair
    outputs = llm.generate(["The capital of France is"], SamplingParams(temperature=0.8, max_tokens=32))
    for output in outputs:
        print(output.prompt, output.outputs[0].text, output.metrics.time_to_first_token)

It builds on launch.api's `Pair` and its public methods. As vLLM's: `generate` reads a text prompt as raw
text (no chat template: the layer tokenizes it here and the pair continues the ids), `chat` takes message
lists through the chat template, `SamplingParams()` samples at temperature 1 for 16 tokens, and a finished
output's text leaves out the stop string or stop token (`include_stop_str_in_output` keeps it). The
runtime's own settings (the decoder, the tree budget) are keyword-only arguments of `LLM` and of each call.
What vLLM names but the runtime cannot do is refused by name with a ConfigError, never ignored, except the
few arguments listed in IGNORED_LLM, which change nothing here. docs/api.md lists every name side by side.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from evaluation.output import DecodeMetrics, DecodeOutput
from evaluation.record import DecodeRecord
from launch.pair_api import Pair
from models.options import EMBEDDED, ModelOptions
from pipeline.config import ConfigError, is_int
from pipeline.metrics import tokens_per_pass
from pipeline.settings import DecodeConfig
from programs.progress import Progress
from target_proc.conversation import ROLES
from target_proc.stops import StopStrings

# vLLM's SamplingParams fields that the runtime has no use for, each accepted at its vLLM default only (which
# changes nothing) and refused at any other value, naming it.
UNSUPPORTED_SAMPLING = {"best_of": None, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                        "repetition_penalty": 1.0, "min_tokens": 0, "logprobs": None,
                        "prompt_logprobs": None, "detokenize": True, "bad_words": None, "allowed_token_ids": None,
                        "logits_processors": None, "truncate_prompt_tokens": None, "guided_decoding": None,
                        "spaces_between_special_tokens": True}
# The runtime's own decode settings (DecodeConfig's fields that SamplingParams has no name for).
RUNTIME = ("budget", "budget_max", "budget_prior", "lend_cores", "cut_pools", "cut_weigh", "ahead", "drafter_window",
           "lookup")
# vLLM's LLM arguments that change nothing here at any value: memory and logging hints (the caches are sized by
# `max_model_len`, the target's max_context).
IGNORED_LLM = ("gpu_memory_utilization", "swap_space", "disable_log_stats")
# vLLM's LLM arguments accepted at the value that changes nothing here, refused at any other.
NEUTRAL_LLM = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "trust_remote_code": False,
               "tokenizer": None, "tokenizer_mode": "auto", "quantization": None, "speculative_config": None}
PAIR_ARGUMENTS = ("pool", "target_options", "drafter_options", "target_process", "drafter_timeout",
                  "ready_timeout", "log_level")


@dataclass(slots=True, init=False)
class SamplingParams:
    """vLLM's sampling parameters, those the runtime honours; keyword arguments only, as vLLM's take them.
    `top_k`, `top_p` and `min_p` filter the target's law exactly as the command line's filters do (every
    decoder's output follows the filtered law); `seed` None is the runtime's seed 0, so outputs repeat from run
    to run (vLLM's differ)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()  # given as a string or a list of them
    stop_token_ids: tuple[int, ...] = ()
    max_tokens: int = 16
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def __init__(self, *positional, **given) -> None:
        if positional:
            raise ConfigError("sampling_params", f"are keyword arguments only (temperature=..., max_tokens=...), "
                                                 f"got {len(positional)} positional")
        names = [f.name for f in dataclasses.fields(self)]
        for name, value in given.items():
            if name in UNSUPPORTED_SAMPLING:
                if value != UNSUPPORTED_SAMPLING[name]:
                    raise ConfigError(name, f"is not supported here: the runtime decodes by exact speculative "
                                            f"sampling of the target's law and accepts only "
                                            f"{UNSUPPORTED_SAMPLING[name]!r}, got {value!r}")
            elif name not in names:
                raise ConfigError(name, f"is not a SamplingParams field; the fields are {', '.join(names)}")
        for f in dataclasses.fields(self):
            setattr(self, f.name, given.get(f.name, f.default))
        self.__post_init__()

    def __post_init__(self) -> None:
        if not (is_int(self.n) and self.n == 1):
            raise ConfigError("n", f"must be 1: the runtime decodes one output per prompt, got {self.n!r}")
        if not (is_int(self.max_tokens) and self.max_tokens >= 1):
            raise ConfigError("max_tokens", f"must be a whole number >= 1 (the runtime has no unbounded decode), "
                                            f"got {self.max_tokens!r}")
        if not (self.seed is None or (is_int(self.seed) and self.seed >= 0)):
            raise ConfigError("seed", f"must be None or a whole number >= 0, got {self.seed!r}")
        if is_int(self.top_k) and self.top_k == -1:
            self.top_k = 0  # vLLM's older spelling of "every token"
        if isinstance(self.stop, str):
            self.stop = (self.stop,)
        elif isinstance(self.stop, list):
            self.stop = tuple(self.stop)
        elif self.stop is None:
            self.stop = ()
        if isinstance(self.stop_token_ids, list):
            self.stop_token_ids = tuple(self.stop_token_ids)
        elif self.stop_token_ids is None:
            self.stop_token_ids = ()
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, got {getattr(self, name)!r}")
        self.decode_config("ar")  # the shared fields checked as the runtime checks them, under the same names

    def decode_config(self, decoder: str, seed: int = 0, **runtime) -> DecodeConfig:
        """These parameters as the runtime's DecodeConfig; `seed`: the one a params seed of None takes."""
        return DecodeConfig(decoder, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                            min_p=self.min_p, stop=self.stop, stop_token_ids=self.stop_token_ids,
                            ignore_eos=self.ignore_eos,
                            max_new_tokens=self.max_tokens, seed=seed if self.seed is None else self.seed,
                            **runtime)

    @classmethod
    def of(cls, value, count: int) -> list[SamplingParams]:
        """`sampling_params` as `generate` takes it (None, one SamplingParams or dict of its fields, or a list
        of them, one per prompt) -> one per prompt."""
        if isinstance(value, (list, tuple)):
            if len(value) != count:
                raise ConfigError("sampling_params", f"holds {len(value)} parameters for {count} prompts: give "
                                                     f"one, or one per prompt")
            return [cls._one(v) for v in value]
        return [cls._one(value)] * count

    @classmethod
    def _one(cls, value) -> SamplingParams:
        if value is None:
            return cls()
        if isinstance(value, SamplingParams):
            return value
        if isinstance(value, dict):
            if bad := [k for k in value if not isinstance(k, str)]:
                raise ConfigError("sampling_params", f"keys must be field names, got {bad[0]!r}")
            return cls(**value)
        raise ConfigError("sampling_params", f"must be a SamplingParams, a dict of its fields or a list of them, "
                                             f"got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """vLLM's CompletionOutput: one output of a request (here always the one, index 0)."""

    index: int
    text: str
    token_ids: list[int]  # ending with the stop token id or end-of-sequence token that ended it, if one did
    cumulative_logprob: float | None  # None: the runtime keeps no log-probabilities
    logprobs: None
    finish_reason: str | None  # "stop" or "length"; None while a stream is under way
    stop_reason: str | int | None  # the stop string or stop token id that matched, else None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """vLLM's request metrics (Unix times) and the runtime's own figures of the decode."""

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
    """vLLM's RequestOutput: one prompt's request, its outputs and metrics; `decode_output` is the pair's own
    DecodeOutput (its `.record` the command line's record), None while a stream is under way."""

    request_id: str
    prompt: str | None  # the text given (for chat, the templated text); None for token ids
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    decode_output: DecodeOutput | None = field(default=None, repr=False)

    @property
    def prompt_logprobs(self) -> None:
        return None


class LLM:
    """vLLM's `LLM` over a pair: `LLM()` the embedded default pair, `LLM(target, drafter=...)` (or
    `LLM(model=...)`) any pair, as `Pair` takes them; `decoder` and the runtime's settings (RUNTIME) apply to
    every call that names none; `pool`, `target_options`, ... (PAIR_ARGUMENTS) go to the Pair. vLLM's `dtype`,
    `max_model_len`, `enforce_eager` and `seed` become the models' dtype, the target's max_context, CUDA
    graphs off and the seed of parameters whose seed is None."""

    def __init__(self, model: str = EMBEDDED, *positional, drafter: str | None = None, decoder: str = "root-draw",
                 dtype: str | None = None, max_model_len: int | None = None, enforce_eager: bool = False,
                 seed: int = 0, **arguments) -> None:
        if positional:  # vLLM's older LLM took its tokenizer second: a drafter here is named, never positional
            raise ConfigError("drafter", f"and every argument after `model` are keyword arguments, got "
                                         f"{len(positional)} more positional")
        for name, spec in (("model", model), ("drafter", drafter)):
            if not (isinstance(spec, str) and spec) and not (name == "drafter" and spec is None):
                raise ConfigError(name, f"must be a model spec as `Pair` takes it (text), got {spec!r}")
        runtime, pair_arguments = _split_arguments(arguments)
        DecodeConfig(decoder, **runtime)  # checked before anything starts
        if not (is_int(seed) and seed >= 0):
            raise ConfigError("seed", f"must be a whole number >= 0, got {seed!r}")
        if not (max_model_len is None or (is_int(max_model_len) and max_model_len >= 1)):
            raise ConfigError("max_model_len", f"must be None or a whole number >= 1, got {max_model_len!r}")
        if not isinstance(enforce_eager, bool):
            raise ConfigError("enforce_eager", f"must be True or False, got {enforce_eager!r}")
        self.decoder, self.runtime, self.seed = decoder, runtime, seed
        target_options = dict(pair_arguments.pop("target_options", None) or {})
        drafter_options = dict(pair_arguments.pop("drafter_options", None) or {})
        for options in (target_options, drafter_options):
            options.update({"dtype": dtype} if dtype is not None else {})
            options.update({"graphs": False} if enforce_eager else {})
        if max_model_len is not None:
            target_options["max_context"] = max_model_len
        for name, options in (("target_options", target_options), ("drafter_options", drafter_options)):
            if unknown := sorted(set(options) - {f.name for f in dataclasses.fields(ModelOptions)}):
                raise ConfigError(name, f"holds {unknown[0]!r}, not a model option")
        self.pair = Pair(model, drafter, target_options=target_options, drafter_options=drafter_options,
                         **pair_arguments)
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
        configs = [self._config(p, decoder, runtime) for p in params]
        requests = [self._prompt(p) for p in given]
        return self._decode_all(requests, params, configs, use_tqdm)

    def chat(self, messages, sampling_params=None, *, use_tqdm: bool = True, decoder: str | None = None,
             chat_template: None = None, add_generation_prompt: bool = True, **runtime) -> list[RequestOutput]:
        """vLLM's `chat`: one conversation (a list of {"role", "content"} messages, system, user and assistant,
        the last the user's) or a list of them, each through the target's chat template -> a RequestOutput
        each."""
        if chat_template is not None:
            raise ConfigError("chat_template", "is not supported: the target's own chat template applies")
        if add_generation_prompt is not True:
            raise ConfigError("add_generation_prompt", "must be True: a chat decode answers the user's message")
        conversations = _conversations(messages)
        params = SamplingParams.of(sampling_params, len(conversations))
        configs = [self._config(p, decoder, runtime) for p in params]
        return self._decode_all([(None, c) for c in conversations], params, configs, use_tqdm)

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
        config = self._config(params, decoder, runtime)
        shown, ids = self._prompt(given)
        request_id, arrival, first = str(next(self._counter)), time.time(), None
        token_ids, text = [], ""
        for chunk in self.pair.stream(ids, config.decoder, **_settings(config)):
            if chunk.finished:
                yield self._output(request_id, shown, chunk.output, params, arrival, first)
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

    def _config(self, params: SamplingParams, decoder: str | None, runtime: dict) -> DecodeConfig:
        if unknown := [name for name in runtime if name not in RUNTIME]:
            raise ConfigError(unknown[0], f"is not a decode setting here; the runtime's are decoder, "
                                          f"{', '.join(RUNTIME)}; vLLM's go in `sampling_params`")
        return params.decode_config(decoder or self.decoder, self.seed, **{**self.runtime, **runtime})

    def _prompt(self, prompt) -> tuple[str | None, list[int]]:
        """A prompt as `generate` takes it -> (its text or None, its token ids)."""
        if isinstance(prompt, str):
            return prompt, self._project_tokenizer().text_ids(prompt)
        if "prompt" in prompt:
            return prompt["prompt"], self._project_tokenizer().text_ids(prompt["prompt"])
        ids = [int(t) for t in prompt["prompt_token_ids"]]
        tokenizer = self._project_tokenizer()
        vocab = len(tokenizer.tok) if hasattr(tokenizer, "tok") else tokenizer.vocab_size
        if bad := [t for t in ids if t >= vocab]:  # as vLLM, against the tokenizer's vocabulary
            raise ConfigError("prompts", f"'prompt_token_ids' holds {bad[0]}, outside the tokenizer's vocabulary "
                                         f"[0, {vocab})")
        return None, ids

    def _decode_all(self, requests: list[tuple[str | None, list]], params: list[SamplingParams],
                    configs: list[DecodeConfig], use_tqdm: bool) -> list[RequestOutput]:
        """(shown prompt or None, token ids or messages) decoded one after another with one bar."""
        outputs = []
        with Progress(len(requests), bar=use_tqdm) as progress:
            for (shown, prompt), p, config in zip(requests, params, configs):
                request_id, arrival = str(next(self._counter)), time.time()
                out = self.pair.decode(prompt, config.decoder, use_tqdm=False, **_settings(config))
                first = out.metrics.finished_time - out.metrics.seconds + _first_commit_seconds(out.record)
                templated = shown is None and not _are_ids(prompt)  # chat: vLLM shows the templated text
                outputs.append(self._output(request_id, out.prompt if templated else shown, out, p, arrival, first))
                progress.step()
        return outputs

    def _output(self, request_id: str, shown: str | None, out: DecodeOutput, params: SamplingParams,
                arrival: float, first: float | None) -> RequestOutput:
        m = out.metrics
        first = first if first is not None else m.finished_time
        completion = CompletionOutput(0, self._text(out, params), list(out.token_ids), None, None, out.finish_reason,
                                      out.stop_reason)
        metrics = RequestMetrics(arrival, first, m.finished_time, m.finished_time, first - arrival, out.decoder,
                                 m.tokens_per_second, tokens_per_pass(len(out.token_ids), m.target_passes), m.tau,
                                 m.rounds, m.target_passes, m.mean_tree_size, m.tree_sizes, m.acceptance, m)
        return RequestOutput(request_id, shown, list(out.prompt_token_ids or []), [completion], True, metrics, out)

    def _text(self, out: DecodeOutput, params: SamplingParams) -> str:
        """The output's text as `params` ask for it: the pair's (vLLM's defaults) unless the stop's text is
        kept or special tokens shown, then decoded again from the ids."""
        if not params.include_stop_str_in_output and params.skip_special_tokens:
            return out.text
        tokenizer = self._project_tokenizer()
        ids = out.token_ids
        if out.finish_reason == "stop" and not isinstance(out.stop_reason, str) and \
                not params.include_stop_str_in_output:
            ids = ids[:-1]  # a stop token id or end-of-sequence token: its text left out, as vLLM leaves it
        text = tokenizer.decode(ids) if params.skip_special_tokens else tokenizer.prompt_text(ids)
        if isinstance(out.stop_reason, str) and (found := StopStrings(tokenizer, params.stop).first(text)):
            at, string = found
            text = text[: at + (len(string) if params.include_stop_str_in_output else 0)]
        return text

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
                hint = "; name the drafter with `drafter`" if name == "speculative_config" else ""
                raise ConfigError(name, f"is not supported here: only {NEUTRAL_LLM[name]!r} is accepted, got "
                                        f"{value!r}{hint}")
        elif name not in IGNORED_LLM:
            raise ConfigError(name, f"is not an argument here; besides model and drafter they are decoder, dtype, "
                                    f"max_model_len, enforce_eager, seed, {', '.join(RUNTIME + PAIR_ARGUMENTS)}")
    return runtime, pair


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
