"""The training loop: a head for a target, from the distilled answers, written where `eagle3:PATH` reads it.

The head starts from its target (docs/training.md), trains with AdamW, a linear warm-up and a cosine decay,
`batch` answers a step, and writes a checkpoint atomically every `save_every` steps: a killed run resumes from
it and ends where an unbroken run would."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from models.eagle3 import Eagle3Head, rotary
from models.eagle3_config import HEAD_KEYS, HeadConfig, shapes_of
from training.distill import Answer
from training.files import write_json, written
from training.ttt import unrolled_loss

HEAD_DTYPE = torch.float16  # the written head's weights (models.eagle3 casts them to the runtime's dtype)
CHECKPOINT_KEYS = {"weights", "optimizer", "curve", "step", "schedule", "answers"}


@dataclass(frozen=True, slots=True)
class Schedule:
    epochs: int = 4
    batch: int = 4  # answers per optimizer step
    lr: float = 1.5e-3
    warmup: int = 30  # optimizer steps
    min_lr: float = 0.1  # the cosine decay's floor, as a share of lr
    clip: float = 1.0  # gradient norm
    steps: int = 5  # drafting steps unrolled (the reference unrolls 7; the CPU pool drafts 3 deep)
    decay: float = 0.8  # step k's loss weight is decay ** k (the reference's)
    seed: int = 0
    save_every: int = 25
    eval_every: int = 200  # optimizer steps between scorings of the held-out answers (0: none)
    freeze_output: bool = False  # lm_head kept at the target's output rows of the draft vocabulary

    def __post_init__(self) -> None:
        for name in ("epochs", "batch", "steps", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be at least 1, not {getattr(self, name)}")
        if not 0 <= self.warmup < 1 << 31 or not 0 <= self.seed < 1 << 32:
            raise ValueError(f"`warmup` must be in [0, 2^31) and `seed` in [0, 2^32) (got {self.warmup}, {self.seed})")
        if not 0 < self.lr < math.inf or not 0 < self.decay <= 1 or not 0 <= self.min_lr <= 1:
            raise ValueError(f"`lr` must be positive and finite, `decay` in (0, 1] and `min_lr` in [0, 1] (got "
                             f"{self.lr}, {self.decay}, {self.min_lr})")
        if self.eval_every < 0:
            raise ValueError(f"`eval_every` must be at least 0, not {self.eval_every}")
        if not 0 < self.clip < math.inf:
            raise ValueError(f"`clip` must be positive and finite, not {self.clip}")

    def total(self, answers: int) -> int:
        """Optimizer steps of a run on `answers` answers."""
        return math.ceil(answers / self.batch) * self.epochs

    def lr_at(self, step: int, total: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        done = (step - self.warmup) / max(1, total - self.warmup)
        return self.lr * (self.min_lr + (1 - self.min_lr) * 0.5 * (1 + math.cos(math.pi * min(1.0, done))))


@dataclass(frozen=True, slots=True)
class Target:
    """What the head takes from its target: shapes, the token embedding, the output layer and final norm (on the
    CPU, whatever the target's device)."""

    config: dict  # the head's config.json (models.eagle3_config.HeadConfig.from_dict reads it)
    embed: torch.Tensor  # (V, T)
    output: torch.Tensor  # (V, T) the target's lm_head
    norm: torch.Tensor  # (T,)
    layers: tuple[int, int, int]  # the target layers whose inputs the head fuses


def head_config(target_cfg, draft_vocab: int) -> dict:
    """A one-layer head of the target's own shapes (config.json in the reference's layout)."""
    t = target_cfg.get_text_config()
    head_dim = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    rope = getattr(t, "rope_parameters", None) or {}
    layers = t.num_hidden_layers
    reference = (2, layers // 2, layers - 3)
    named = {} if layers > 3 else {"eagle_config": {"eagle_aux_hidden_state_layer_ids":  # too few for the reference's
                                                     [min(max(i, 0), layers - 1) for i in reference]}}
    return {**named, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": t.hidden_size, "num_attention_heads": t.num_attention_heads,
            "num_key_value_heads": t.num_key_value_heads, "head_dim": head_dim,
            "intermediate_size": t.intermediate_size, "rms_norm_eps": t.rms_norm_eps,
            "rope_theta": float(rope.get("rope_theta", getattr(t, "rope_theta", 10000.0))),
            "max_position_embeddings": t.max_position_embeddings, "vocab_size": t.vocab_size,
            "draft_vocab_size": draft_vocab, "hidden_act": "silu", "torch_dtype": "float16"}


def initial_weights(target: Target, cfg: HeadConfig, d2t: torch.Tensor, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = d2t + torch.arange(len(d2t))
    w = {}
    for key, shape in shapes_of(cfg).items():
        if key in HEAD_KEYS:
            w[key] = torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=gen) * 0.02
    w["lm_head.weight"] = target.output[ids].float().clone()
    w["norm.weight"] = target.norm.float().clone()
    t = cfg.target_hidden
    w["fc.weight"][:, 2 * t:] += torch.eye(cfg.hidden, t)  # the highest layer passes through
    return w


def build_head(target: Target, cfg: HeadConfig, weights: dict, d2t: torch.Tensor, device="cpu") -> Eagle3Head:
    """The head over `weights` (trained in place: they must be on `device`)."""
    inv, scale = rotary(cfg, device)
    ids = (d2t + torch.arange(len(d2t))).to(device)
    return Eagle3Head(cfg, weights, target.embed.to(device, torch.float32), ids, inv, scale)


def train(answers: list[Answer], target: Target, d2t: torch.Tensor, t2d: torch.Tensor, schedule: Schedule,
          work: Path, progress=None, device="cpu", judge=None) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Train from the checkpoint in `work` (or from the start) to the end of the schedule, on `device` ->
    (weights on the CPU: the best judged, else the last; the loss curve: one row per optimizer step).
    progress(done, total, row) is called after each step. Every `eval_every` steps and at the last, a `judge`
    (Judge) scores the head into that step's row. The answers stay on the CPU; each is moved to `device`."""
    cfg = HeadConfig.from_dict(target.config)
    ids = d2t + torch.arange(len(d2t))
    output_rows = target.output[ids].to(device, torch.float32)  # (Vd, T): the target's logits over the draft vocab
    per_epoch = math.ceil(len(answers) / schedule.batch)
    total = schedule.total(len(answers))
    checkpoint = work / "checkpoint.pt"
    data = data_digest(answers, d2t)
    start, curve, step, moments, best = _start(checkpoint, initial_weights(target, cfg, d2t, schedule.seed),
                                               schedule, len(answers), data)
    if progress:
        progress(step, total, None)  # where the training starts: 0, or the checkpoint's step
    weights = {k: v.to(device).requires_grad_(not (schedule.freeze_output and k == "lm_head.weight"))
               for k, v in start.items()}
    trained = [v for v in weights.values() if v.requires_grad]
    head = build_head(target, cfg, weights, d2t, device)
    optimizer = _optimizer(trained, schedule, moments, checkpoint)
    t2d = t2d.bool().to(device)
    while step < total:
        epoch, at = divmod(step, per_epoch)
        order = torch.randperm(len(answers), generator=torch.Generator().manual_seed(schedule.seed * 1000 + epoch))
        batch = order[at * schedule.batch: (at + 1) * schedule.batch].tolist()
        for group in optimizer.param_groups:
            group["lr"] = schedule.lr_at(step, total)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_sum, rows, hits = _gradients(head, [answers[j] for j in batch], output_rows, t2d, schedule, device)
        norm = torch.nn.utils.clip_grad_norm_(trained, schedule.clip)
        optimizer.step()
        step += 1
        row = {"step": step, "epoch": epoch, "loss": loss_sum / len(batch), "lr": schedule.lr_at(step - 1, total),
               "grad_norm": float(norm), "top1": [h / r if r else None for h, r in zip(hits, rows)],
               "seconds": time.perf_counter() - t0}
        curve.append(row)
        if judge and schedule.eval_every and (step % schedule.eval_every == 0 or step == total):
            best = judge(head, weights, curve, best)
        if progress:
            progress(step, total, row)
        if step % schedule.save_every == 0 or step == total:
            _save(checkpoint, {"weights": {k: v.detach().cpu() for k, v in weights.items()},
                               "optimizer": optimizer.state_dict(), "curve": curve, "step": step, "best": best,
                               "schedule": asdict(schedule), "answers": len(answers), "data": data})
    return best["weights"] if best else {k: v.detach().cpu() for k, v in weights.items()}, curve


def _optimizer(trained: list, schedule: Schedule, moments, checkpoint: Path) -> torch.optim.AdamW:
    """AdamW over the `trained` weights, from the checkpoint's `moments` where there are (ValueError where they
    are damaged)."""
    optimizer = torch.optim.AdamW(trained, lr=schedule.lr, betas=(0.9, 0.95), weight_decay=0.0)
    if moments is not None:
        try:
            optimizer.load_state_dict(moments)  # its state moves to the weights' device
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"{checkpoint} is damaged or not a checkpoint (its optimizer's state: {e}); delete it "
                             f"to train from the start") from None
    return optimizer


@dataclass(frozen=True, slots=True)
class Judge:
    """Scores a head during its training: score(head) -> a dict with a "score" (higher is better) put in the
    step's curve row; improved(weights, curve) is told each head that scores above every one before it."""

    score: object
    improved: object

    def __call__(self, head, weights: dict, curve: list[dict], best: dict | None) -> dict | None:
        """-> the best so far ({"step", "score", "weights" on the CPU}), curve[-1] given its scores."""
        curve[-1]["eval"] = self.score(head)
        if best is not None and curve[-1]["eval"]["score"] <= best["score"]:
            return best
        best = {"step": curve[-1]["step"], "score": curve[-1]["eval"]["score"],
                "weights": {k: v.detach().cpu().clone() for k, v in weights.items()}}
        self.improved(best["weights"], curve)
        return best


def _gradients(head: Eagle3Head, batch: list[Answer], output_rows: torch.Tensor, t2d: torch.Tensor,
               schedule: Schedule, device) -> tuple[float, list[int], list[int]]:
    """Accumulate the batch's mean loss gradient -> (summed loss, scored rows per step, top-1 hits per step)."""
    loss_sum, rows, hits = 0.0, [0] * schedule.steps, [0] * schedule.steps
    for a in batch:
        scores = unrolled_loss(head, a.last.to(device, torch.float32) @ output_rows.T, a.tokens.to(device),
                               a.start, a.features.to(device, torch.float32), a.argmax.to(device), t2d,
                               schedule.steps, schedule.decay)
        (scores.loss / len(batch)).backward()
        loss_sum += float(scores.loss.detach())  # a host-device sync per answer
        for k, (r, h) in enumerate(zip(scores.rows, scores.hits)):
            rows[k] += r
            hits[k] += h
    return loss_sum, rows, hits


def _start(checkpoint: Path, initial: dict, schedule: Schedule, answers: int, data: str):
    """-> (weights, loss curve, step, the optimizer's state or None, the best judged or None) to train from: the
    checkpoint's where there is one (ValueError where it is damaged or of another run), else `initial` at step 0."""
    if not checkpoint.exists():
        return initial, [], 0, None, None
    state = read_checkpoint(checkpoint, {k: v.shape for k, v in initial.items()})
    if ({**asdict(Schedule()), **state["schedule"]} != asdict(schedule) or state["answers"] != answers
            or state.get("data", data) != data):  # a checkpoint written before the digest: by the count
        raise ValueError(f"{checkpoint} was written by a run with another schedule or data; delete it to train from "
                         f"the start")
    return state["weights"], state["curve"], state["step"], state["optimizer"], state.get("best")


def data_digest(answers: list[Answer], d2t: torch.Tensor) -> str:
    """What a checkpoint was trained on: the answers' tokens and starts, and the draft vocabulary."""
    h = hashlib.blake2b(digest_size=16)
    for a in answers:
        h.update(a.start.to_bytes(8, "little"))
        h.update(a.tokens.to(torch.int64).numpy().tobytes())
    h.update(d2t.to(torch.int64).numpy().tobytes())
    return h.hexdigest()


def _save(path: Path, state: dict) -> None:
    with written(path) as partial:
        torch.save(state, partial)


def read_checkpoint(path: Path, shapes: dict) -> dict:
    """The state `_save` wrote, its weights of `shapes`; ValueError naming the file and saying to delete it where
    it is damaged (truncated, of another program, of another head's shapes)."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
        problem = _checkpoint_problem(state, shapes)
    except Exception as e:  # a truncated or foreign file, whatever torch's reader raised for it
        problem = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if problem:
        raise ValueError(f"{path} is damaged or not a checkpoint ({problem}); delete it to train from the start")
    return state


def _checkpoint_problem(state, shapes: dict) -> str | None:
    if not isinstance(state, dict) or not CHECKPOINT_KEYS <= set(state):
        return "not the state of a training"
    if {k: v.shape for k, v in state["weights"].items()} != shapes:
        return "its weights are not this head's"
    if not isinstance(state["step"], int) or state["step"] < 1 or len(state["curve"]) != state["step"]:
        return f"step {state['step']!r} beside {len(state['curve'])} rows of its loss curve"
    return None


def write_head(out: Path, config: dict, weights: dict, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
    """config.json and model.safetensors in the reference's layout (16-bit weights, d2t int64, t2d bool)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: weights[k].to(HEAD_DTYPE).contiguous() for k in HEAD_KEYS}
    big = [k for k, v in tensors.items() if not torch.isfinite(v).all()]
    if big:
        raise ValueError(f"the head's weights {big} do not fit {HEAD_DTYPE} (training diverged?)")
    tensors["d2t"], tensors["t2d"] = d2t.long().contiguous(), t2d.bool().contiguous()
    with written(out / "model.safetensors") as partial:
        save_file(tensors, str(partial))
    write_json(out / "config.json", config, indent=2)
