"""Self-distillation data: the target's own answers to the training prompts, with what the head learns from.

The target answers (greedily for even prompts, sampled at T = 1 for odd ones), and the same passes keep, for
every token but the last, the features of the layers the head fuses and the target's final normed hidden
state. Shards are written one file each, atomically, so a killed run resumes at the first shard not written;
a shard is the same for the same seed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from training.files import written

STORE_DTYPE = torch.bfloat16  # features and hidden states on disk (the target's activations exceed float16)


@dataclass(frozen=True, slots=True)
class Answer:
    """One chat-templated prompt and the target's answer. tokens: (n,) int64, the answer from `start`;
    features: (n - 1, 3T) and last: (n - 1, T) for tokens 0 .. n - 2 (STORE_DTYPE); argmax: (n - 1,) the
    target's most likely next token after each."""

    tokens: torch.Tensor
    start: int
    features: torch.Tensor
    last: torch.Tensor
    argmax: torch.Tensor

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if not 0 < self.start < n or not len(self.features) == len(self.last) == len(self.argmax) == n - 1:
            raise ValueError(f"an answer of {n} tokens from {self.start} with {len(self.features)} feature rows, "
                             f"{len(self.last)} hidden rows and {len(self.argmax)} argmax rows")

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "start": self.start, "features": self.features, "last": self.last,
                "argmax": self.argmax}


class Recorder:
    """Forward hooks on a transformers causal LM: the inputs of `layers` and the final norm's output of every
    pass, in call order, as (B, n, H) tensors."""

    def __init__(self, model, layers: tuple[int, ...]) -> None:
        from models.hf import decoder_layers

        decoder = decoder_layers(model)
        self.inputs: list[list[torch.Tensor]] = [[] for _ in layers]
        self.outputs: list[torch.Tensor] = []
        self.handles = [decoder[i].register_forward_pre_hook(
            lambda module, args, kwargs, j=j: self.inputs[j].append((args[0] if args else kwargs["hidden_states"])
                                                                    .detach()), with_kwargs=True)
            for j, i in enumerate(layers)]
        self.handles.append(model.get_decoder().norm.register_forward_hook(
            lambda module, args, out: self.outputs.append(out.detach())))

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        """-> ((B, P, layers * H) features, (B, P, H) final hidden) over the passes so far, then forget them."""
        features = torch.cat([torch.cat(calls, 1) for calls in self.inputs], -1)
        last = torch.cat(self.outputs, 1)
        self.inputs = [[] for _ in self.inputs]
        self.outputs = []
        return features, last

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], *, sample: bool, max_new: int, end_ids: tuple[int, ...],
                   pad_id: int, layers: tuple[int, ...], seed: int) -> list[Answer]:
    """The target's answers to `prompts` (chat-templated ids) in one left-padded generate call, on the model's
    device, their features kept by forward hooks (any architecture); the answers are kept on the CPU."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    recorder = Recorder(model, layers)
    try:
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=sample,
                             temperature=1.0 if sample else None, top_k=0 if sample else None,
                             top_p=1.0 if sample else None, eos_token_id=list(end_ids), pad_token_id=pad_id)
        features, last = recorder.take()
    finally:
        recorder.close()
    head = model.get_output_embeddings().weight
    answers = []
    for b, p in enumerate(prompts):
        new = out[b, width:].tolist()
        ends = [i for i, t in enumerate(new) if t in end_ids]
        new = new[: ends[0] + 1] if ends else new
        n = len(p) + len(new)
        rows = slice(width - len(p), width - len(p) + n - 1)
        h = last[b, rows]
        answers.append(Answer(torch.tensor(p + new), len(p), features[b, rows].to("cpu", STORE_DTYPE),
                              h.to("cpu", STORE_DTYPE), (h @ head.T).argmax(-1).int().cpu()))
    return answers


def shard_path(work: Path, index: int, kind: str = "answers") -> Path:
    """The file of shard `index` of the training prompts' answers (`kind` "answers") or the context prompts'."""
    return work / f"{kind}-{index:04d}.pt"


def write_shard(path: Path, answers: list[Answer]) -> None:
    """Atomically: a killed write leaves no shard, a failed one (a full disk) is NotWritten naming it."""
    with written(path) as partial:
        torch.save([a.to_dict() for a in answers], partial)


def read_shard(path: Path) -> list[Answer]:
    """The shard's answers, their tensors mapped from the file rather than read into memory: the training
    reads each answer's rows as it batches them, and a run's answers need not fit in memory (the OS keeps in
    its page cache what does). ValueError naming the file where it cannot be read."""
    try:
        return _answers(torch.load(path, weights_only=True, mmap=True))
    except OSError as e:  # a file system that cannot map files, no memory left to map it, or a damaged file
        if _readable(path):
            raise ValueError(f"{path}: cannot be mapped into memory ({e})") from None
        error = e
    except Exception as e:  # a truncated or foreign file, whatever torch's reader raised for it
        error = e
    raise ValueError(f"{path} is damaged or not a training shard ({type(error).__name__}: "
                     f"{str(error).splitlines()[0][:160] if str(error) else ''}); delete it and run the same command "
                     f"again to answer its prompts again") from None


def _answers(rows) -> list[Answer]:
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TypeError("it holds no list of answers")
    return [Answer(**row) for row in rows]


def _readable(path: Path) -> bool:
    """Whether the shard reads whole when it is not mapped: a good file on a file system that cannot map it."""
    try:
        _answers(torch.load(path, weights_only=True))
        return True
    except Exception:  # damaged: the caller says so
        return False
