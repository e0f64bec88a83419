"""Load an EAGLE-3 drafter: `eagle3:PATH` (a head directory or a model id in the local Hugging Face cache),
`random:eagle3-SHAPE` or `eagle3:mock` (docs/eagle3.md); `:int8` after any of them runs the head's linear layers
as dynamic int8 products on the CPU. A head takes its target's tokenizer and, where its checkpoint holds none, its
token embedding: the drafter is told the target (`head_target`), and a head that does not fit it is refused here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from models import shapes
from models.shapes import HEAD_SHAPES
from models.eagle3 import Eagle3Head, HeadRunner, random_head
from models.eagle3_config import PREFIX, RANDOM_PREFIX, HeadConfig, HeadError, head_dir, local_dir, read_head
from models.options import EMBEDDED, INT8_SUFFIX, ModelOptions, head_path_spec
from models.runner import RunnerKind

MOCK_HEAD = PREFIX + "mock"


@dataclass(frozen=True, slots=True)
class TargetSide:
    """What a head takes of its target: its shape and tokenizer, and where its embedding comes from."""

    hidden: int
    vocab: int
    layers: int
    tokenizer: object
    embedding: object  # () -> (V, T) tensor, read only where the head holds no embedding


@dataclass(frozen=True, slots=True)
class ReadHead:
    """A head directory read and checked (read_head), before the drafter binds its endpoint."""

    directory: Path
    cfg: HeadConfig
    weights: dict


def read_head_dir(model: str) -> ReadHead | None:
    """The head directory of an `eagle3:PATH` spec (`:int8` or not) read and checked -> ReadHead; None for any
    other spec. HeadError names what is wrong in one line."""
    spec = head_path_spec(model.removesuffix(INT8_SUFFIX))
    if not spec.startswith(PREFIX) or spec == MOCK_HEAD:
        return None
    directory = head_dir(spec)
    return ReadHead(directory, *read_head(directory))


def load_head(options: ModelOptions, dtype: torch.dtype, embedded: Callable[[], Path],
              revision_of: Callable[[str], str],
              read: ReadHead | None = None) -> tuple[object, RunnerKind, object, str]:
    """An EAGLE-3 drafter -> (its model: an Eagle3Head or a MockHead, its runner class, its target's tokenizer,
    what its weights are). embedded: the embedded default's checkpoint directory (converted once); revision_of: what a
    checkpoint directory's weights are (models.load hands both in); read: the head directory as read_head_dir read
    it already (else it is read here)."""
    spec = options.model.removesuffix(INT8_SUFFIX)
    quantized = options.model.endswith(INT8_SUFFIX)  # the head's linear layers as dynamic int8 (CPU)
    if spec == MOCK_HEAD:
        if quantized:
            raise HeadError(f"{options.model!r}: the mock head has no linear layers to quantize")
        from models.mock import MockHead, MockHeadRunner, MockModel
        from models.tokenizers import MockTokenizer

        if options.head_target not in ("", "mock"):
            raise HeadError(f"{spec!r} drafts over the mock target, not {options.head_target!r}")
        model = MockModel(options.mock_vocab, options.mock_seed, options.mock_noise)
        return (MockHead(model), MockHeadRunner, MockTokenizer(options.mock_vocab),
                f"mock head vocab={options.mock_vocab} seed={options.mock_seed} noise={options.mock_noise:g}")
    if not options.head_target:
        raise HeadError(f"{spec!r} is an EAGLE-3 head: it needs `head_target`, the target model whose tokenizer "
                        f"and token embedding it takes (the launcher passes --target)")
    target = target_side(options.head_target, embedded, options.allow_download)
    if spec.startswith(RANDOM_PREFIX):
        name = spec[len(RANDOM_PREFIX):]
        if name not in HEAD_SHAPES:
            raise HeadError(f"{spec!r}: unknown random head shape {name!r}; known: {', '.join(HEAD_SHAPES)}")
        cfg = HeadConfig.from_dict(HEAD_SHAPES[name])
        cfg.check_target(target.hidden, target.vocab, target.layers)
        embed = torch.randn(cfg.vocab, cfg.hidden, generator=torch.Generator().manual_seed(1)) * 0.02
        head, revision = random_head(cfg, embed, options.device, dtype), f"{spec} seed=0"
    else:
        read = read or read_head_dir(spec)
        directory, cfg, weights = read.directory, read.cfg, read.weights
        cfg.check_target(target.hidden, target.vocab, target.layers)
        embed = None if "embed_tokens.weight" in weights else target.embedding()
        head, revision = Eagle3Head.build(cfg, weights, embed, options.device, dtype), revision_of(str(directory))
    if quantized:
        head.quantize()
    return head, HeadRunner, target.tokenizer, revision


def target_side(spec: str, embedded: Callable[[], Path], allow_download: bool = False) -> TargetSide:
    """The target of `spec` as its head needs it, without loading its weights (but the embedding's)."""
    from models.tokenizers import MockTokenizer

    if spec.startswith(shapes.PREFIX):
        name = spec[len(shapes.PREFIX):]
        if name not in shapes.SHAPES:
            raise HeadError(f"`head_target` {spec!r}: unknown random model shape {name!r}")
        vocab, hidden, _, layers, *_ = shapes.SHAPES[name]

        def embedding() -> torch.Tensor:
            return shapes.random_model(name, "cpu", torch.float32).get_input_embeddings().weight.detach()
        return TargetSide(hidden, vocab, layers, MockTokenizer(vocab), embedding)
    if spec == "mock":
        raise HeadError("the mock target has no layers to take features from: its head is `eagle3:mock`")
    directory = embedded() if spec.removesuffix(INT8_SUFFIX) == EMBEDDED else local_dir(
        spec.removesuffix(INT8_SUFFIX), f"`head_target` {spec!r} is neither a checkpoint directory nor in the local "
        f"Hugging Face cache", allow_download, ["*.json", "*.safetensors", "*.model", "*.txt"])
    cfg = json.loads((directory / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    from transformers import AutoTokenizer, GenerationConfig

    from models.tokenizers import HFTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    try:
        generation = GenerationConfig.from_pretrained(directory)
    except OSError:  # a checkpoint without generation_config.json
        generation = None
    return TargetSide(text["hidden_size"], text["vocab_size"], text["num_hidden_layers"],
                      HFTokenizer(tokenizer, generation), lambda: checkpoint_embedding(directory))


def checkpoint_embedding(directory: Path) -> torch.Tensor:
    """The token embedding (V, T) of a transformers checkpoint, read alone from its safetensors files."""
    from safetensors import safe_open

    index = directory / "model.safetensors.index.json"
    names = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight", "embed_tokens.weight")
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {weight_map[n]: n for n in names if n in weight_map}
    else:
        files = {"model.safetensors": None}
    for file, name in files.items():
        path = directory / file
        if not path.is_file():
            continue
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            for n in ([name] if name else names):
                if n in keys:
                    return f.get_tensor(n)
    raise HeadError(f"the target checkpoint {str(directory)!r} holds no token embedding in safetensors files "
                    f"(model.embed_tokens.weight)")
