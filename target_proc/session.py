"""A target process's decoding session: the target model, its tokenizer and a drafter client."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from models.kv_cache import KVCache
from models.load import load
from models.options import ModelOptions
from pipeline.budget import MeasuredPasses, SessionBudgets
from pipeline.config import InputError, PoolConfig
from pipeline.decode import DrafterClient, Observer, decode
from pipeline.result import DecodeResult
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig, stream_seed
from protocol.keys import key_dir, own_keys, public_key
from protocol.transport import CONNECT_TIMEOUT_S, Channel, ClientKeys, is_loopback
from target_proc import costs
from target_proc.client import RemoteDrafter
from target_proc.recorder import RoundRecorder
from target_proc.stops import check_stop_ids, stop_check
from target_proc.target import Target

SHUTDOWN_WAIT_S = 2.0  # how long a clean exit waits for its Shutdown to leave


class InsecureEndpoint(InputError):
    """A drafter beyond this machine named without its key: prompts would cross the network in clear."""


class TargetSession:
    """The target's side of a decoding session: its model with the KV cache, its tokenizer and its drafter."""

    def __init__(self, target: Target, tokenizer, drafter: DrafterClient | None, pool: PoolConfig,
                 models: dict | None = None, kept: costs.PassTimes | None = None, retime: bool = False) -> None:
        """kept: where this machine's pass timings for budget auto are kept (None: timed at every start);
        retime: time them again and keep the new ones."""
        self.target = target
        self.tokenizer = tokenizer
        self.drafter = drafter
        self.pool = pool
        self.models = models or {}  # "target" and "drafter": model, revision, dtype, device (provenance)
        self.kept, self.retime = kept, retime
        self.budgets = SessionBudgets(self._pass_timings)  # budget auto's memory

    def _pass_timings(self, cap: int) -> MeasuredPasses:
        timed = lambda: costs.measure(self.target, cap, drafter=self.drafter, pool_size=self.pool.size)  # noqa: E731
        if self.kept is None:
            return timed()
        key = costs.timing_key(self.target, self.models, self.pool.size, cap)
        return costs.kept_or_measured(self.kept, key, timed, self.retime)

    def decode(self, prompt_ids: Sequence[int], config: DecodeConfig, prompt_key: str | int, *,
               sync_phases: bool = False, observe: Observer | None = None, on_tokens=None) -> DecodeResult:
        """One decode; its verifier's generator is seeded by (config.seed, prompt_key, decoder).
        sync_phases: wait for the device at the end of every phase (see pipeline.decode.decode). On the CPU the target
        switches torch's thread count between passes; the caller's count is restored. observe: see
        pipeline.decode.decode (a RoundRecorder needs room for a pass over the pool). The config's stop strings are
        checked on the text this session's tokenizer gives (target_proc.stops)."""
        if self.drafter is None and RULES[config.decoder].select is not None:
            raise InputError(f"decoder {config.decoder!r} needs a drafter, and this target has none: it decodes "
                             f"plainly (`ar`)")
        recorded = isinstance(observe, RoundRecorder)
        extra = max(0, RoundRecorder.slots(self.pool.size) - config.largest_tree) if recorded else 0  # see sweep
        config.check_fits(len(prompt_ids) + extra, self.target.capacity)
        check_stop_ids(config, self.target.runner.vocab_size)
        generator = torch.Generator(device=self.target.device)
        generator.manual_seed(stream_seed(config.seed, prompt_key, config.decoder))
        threads = torch.get_num_threads()
        try:
            pass_costs = experience = None
            if config.auto:
                pass_costs, experience = self.budgets.for_decode(
                    config.decoder, RULES[config.decoder].root_pass, config.temperature, config.budget_max,
                    config.budget_prior == "session", config.drafting, whole_pool=not config.cut_pools)
            return decode(self.target, self.drafter, prompt_ids, config, self.tokenizer.eos, generator,
                          sync_phases=sync_phases, costs=pass_costs, experience=experience, observe=observe,
                          on_tokens=on_tokens, stop_check=stop_check(self.tokenizer, config))
        finally:
            torch.set_num_threads(threads)


def client_keys(endpoint: str, drafter_key: str = "", keys: str = "") -> ClientKeys | None:
    """The CURVE keys of the connection to the drafter: its public key (`drafter_key`) and this side's own
    keypair (from the key directory `keys`). None, for a connection in clear, only on this machine."""
    if not drafter_key:
        if not is_loopback(endpoint):
            raise InsecureEndpoint(f"`endpoint` {endpoint} is beyond this machine: name the drafter's public key "
                                   f"with `drafter_key` (launch/pair.sh keys prints it on the drafter's host), so "
                                   f"that prompts cross the network encrypted, to that drafter alone")
        return None
    return ClientKeys(own_keys(key_dir(keys)), public_key(drafter_key))


def check_planned_kv_memory(options: ModelOptions) -> None:
    """The target's KV cache against the memory free now, before the model loads, from its config: a cache that
    cannot fit is refused in a moment, not after the load and the kernels' timing (models.kv_cache checks it
    again, from the loaded model, as it allocates it)."""
    from models import memory
    from models.cuda_env import require_cuda
    from models.kv_cache import check_fits
    from models.kv_plan import planned_kv_bytes

    need = planned_kv_bytes(options, options.max_context)
    if need is None:
        return
    if options.device.startswith("cuda"):
        require_cuda(f"--device {options.device}")  # as the load would, before CUDA is asked anything
    device = torch.device(options.device)
    check_fits(need, memory.free_bytes(device), options.max_context, device, "target")


def _load_target(model: ModelOptions):
    """The target model loaded, its KV cache sized for model.max_context -> (the loaded model, its Target)."""
    loaded = load(model, "target")
    return loaded, Target(KVCache(loaded, "target").at_least(model.max_context), model.cpu_threads)


@contextmanager
def open_session(model: ModelOptions, endpoint: str | None, pool: PoolConfig, drafter_timeout: float,
                 ready_timeout: float, drafter_key: str = "", keys: str = "",
                 connect_timeout: float = CONNECT_TIMEOUT_S) -> Iterator[TargetSession]:
    """Connect to the drafter, load the target, handshake; on a clean exit ask the drafter to shut down.
    Nothing answering at `endpoint` within `connect_timeout` s stops it before the load (NothingAnswers); a
    drafter that answers is given `ready_timeout` s for its handshake (it may still be loading its model).
    endpoint None: no drafter, the target alone, decoding plainly (`ar`): one model's memory."""
    log = logging.getLogger("target")
    if endpoint is None:
        check_planned_kv_memory(model)
        loaded, target = _load_target(model)
        log.info("loaded %s on %s; no drafter: it decodes plainly", model.model, model.device)
        yield TargetSession(target, loaded.tokenizer, None, pool, {"target": loaded.identity}, costs.PassTimes(),
                            model.retime)
        return
    curve = client_keys(endpoint, drafter_key, keys)  # refuses an insecure endpoint before loading anything
    check_planned_kv_memory(model)  # so does too large a cache
    channel = Channel.connect(endpoint, peer="drafter", keys=curve)
    linger = 0.0
    try:
        channel.wait_answer(connect_timeout)  # before the load: a wrong address is said in seconds, not minutes
        loaded, target = _load_target(model)
        log.info("loaded %s on %s; waiting for the drafter at %s%s", model.model, model.device, endpoint,
                 " (CURVE)" if drafter_key else "")
        drafter = RemoteDrafter(channel, loaded.vocab_size, pool, drafter_timeout)
        ready = drafter.handshake(loaded.name, loaded.tokenizer.fingerprint, target.capacity, ready_timeout,
                                  shape=loaded.shape, feature_dtype=loaded.feature_dtype)
        log.info("drafter %r ready", ready.model)
        if ready.layers():  # an EAGLE-3 drafter: each commit carries the inputs of these layers
            target.keep_features(ready.layers())
            log.info("the drafter is an EAGLE-3 head: commits carry the inputs of target layers %s",
                     ", ".join(map(str, ready.layers())))
        kernels = ready.kernels()
        models = {"target": loaded.identity,
                  "drafter": {"model": ready.model, "revision": ready.revision, "dtype": ready.dtype,
                              "device": ready.device, **({"linear_kernels": kernels} if kernels else {})}}
        yield TargetSession(target, loaded.tokenizer, drafter, pool, models, costs.PassTimes(), model.retime)
        drafter.shutdown()
        linger = SHUTDOWN_WAIT_S
    finally:
        channel.close(linger)
