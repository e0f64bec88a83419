"""Mock models: next-token rows that are a deterministic function of a seed and the whole prefix.

A prefix's row comes from a chained blake2b digest of its tokens, so the mock's "KV cache" holds one
digest per slot, and a pass must find each token's predecessor through exactly the positions, slots and
visibility a real model would use. A wrong mask or slot fails loudly instead of giving plausible rows.
Token 0 is the end-of-sequence token. The mock drafter adds `noise` times an independent deterministic
perturbation to the target's logits, so its agreement with the target is partial and tunable.

The mock target's "features" (what an EAGLE-3 head takes) are its slots' digests, 16 bytes as 16 float32
values. The mock head (MockHead) extends the digest its row takes by the row's token: fed the right features
it gives the mock drafter's rows, and any feature that is off by a token gives rows of another prefix, as
does any other row of finite values, in any dtype a target sends."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from models.kv_plan import MOCK_SLOT_BYTES
from models.runner import ModelRunner, RowInputs, check_rows

EOS = 0
LOGIT_SCALE = 3.0  # spread of the mock logits: rows are peaked enough for drafts to be accepted


class MaskError(RuntimeError):
    """A pass's visibility does not describe one contiguous prefix for a token."""


class MockModel:
    """Rows of the mock target (noise = 0) or of a mock drafter (noise > 0) over `vocab_size` tokens."""

    device = torch.device("cpu")  # as a transformers model says where its weights are, and their type
    dtype = torch.float32

    def __init__(self, vocab_size: int, seed: int, noise: float = 0.0) -> None:
        assert vocab_size >= 2 and noise >= 0, (vocab_size, noise)  # checked where the values enter
        self.vocab_size = vocab_size
        self.seed = seed
        self.noise = noise
        self.empty = hashlib.blake2b(f"mock:{seed}".encode(), digest_size=16).digest()

    @staticmethod
    def extend(digest: bytes, token: int) -> bytes:
        """Digest of a prefix extended by one token."""
        return hashlib.blake2b(digest + int(token).to_bytes(8, "little"), digest_size=16).digest()

    def digest(self, tokens) -> bytes:
        d = self.empty
        for t in tokens:
            d = self.extend(d, t)
        return d

    def logits(self, digest: bytes) -> np.ndarray:
        """(V,) float32 logits at the prefix with this digest."""
        rows = LOGIT_SCALE * np.random.default_rng(np.frombuffer(digest, np.uint64)).standard_normal(self.vocab_size)
        if self.noise:
            twist = hashlib.blake2b(digest + b"drafter", digest_size=16).digest()
            rows += self.noise * np.random.default_rng(np.frombuffer(twist, np.uint64)).standard_normal(self.vocab_size)
        return rows.astype(np.float32)


class MockRunner:
    """A MockModel behind the runner interface (models.runner.ModelRunner), with a per-slot digest cache."""

    row_inputs: tuple[str, ...] = ()

    def __init__(self, model: MockModel, capacity: int) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.capacity = capacity
        self.device = model.device
        self.digests: list[bytes | None] = [None] * capacity
        self.positions = np.full(capacity, -1, np.int64)

    def keep_features(self, layers: tuple[int, ...]) -> None:
        """The mock keeps every slot's digest: its features (what layers a head names does not matter)."""

    def features_at(self, slots) -> torch.Tensor:
        """(n,) slots -> (n, FEATURE_WIDTH) float32: each slot's digest, a byte a value."""
        return torch.tensor(np.stack([digest_values(self.digests[s]) for s in np.asarray(slots).tolist()]))

    def forward(self, tokens: np.ndarray, positions: np.ndarray, slots: np.ndarray, prefix: int,
                cols: np.ndarray, vis: np.ndarray, last_only: bool = False,
                rows: RowInputs | None = None) -> torch.Tensor:
        """tokens, positions, slots: (n,); cols: (m,) slots; vis: (n, m) bool. -> (n or 1, V) logits."""
        if rows is not None:
            check_rows(self, rows, len(tokens))
        if not np.array_equal(self.positions[:prefix], np.arange(prefix)):
            raise MaskError(f"slots [0, {prefix}) do not hold positions 0..{prefix - 1}")
        rows = []
        for i, (token, pos, slot) in enumerate(zip(tokens.tolist(), positions.tolist(), slots.tolist())):
            seen = [c for c in cols[vis[i]].tolist() if c != slot]
            if vis[i].sum() != len(seen) + 1:
                raise MaskError(f"row {i} (slot {slot}) does not see itself")
            got = sorted(self.positions[seen].tolist())
            if prefix + len(got) != pos or got != list(range(prefix, pos)):
                raise MaskError(f"row {i} at position {pos} sees positions 0..{prefix - 1} and {got}, "
                                f"not one contiguous prefix")
            before = self.model.empty if pos == 0 else self.digests[self._slot_at(pos - 1, seen, prefix)]
            self.digests[slot] = self.model.extend(before, token)
            self.positions[slot] = pos
            if not last_only or i == len(tokens) - 1:
                rows.append(self.model.logits(self.digests[slot]))
        return torch.from_numpy(np.stack(rows))

    def _slot_at(self, pos: int, seen: list[int], prefix: int) -> int:
        if pos < prefix:
            return pos
        return next(s for s in seen if self.positions[s] == pos)

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy the cache entries of slots `src` to slots `dst` (all read before any is written)."""
        digests = [self.digests[s] for s in src.tolist()]
        positions = self.positions[src].copy()
        for d, digest, p in zip(dst.tolist(), digests, positions.tolist()):
            self.digests[d] = digest
            self.positions[d] = p

    def synchronize(self) -> None:
        pass  # its passes are done when they return

    # -- the class as a loader holds it (models.runner.RunnerKind) --------------------------------------

    @classmethod
    def build(cls, model: MockModel, capacity: int, *, graphs: bool, rehearse: bool = False) -> ModelRunner:
        assert not graphs, "a mock runner captures no graphs"  # models.load never asks it to
        return cls(model, capacity)  # nor rehearses any: its passes have no shapes to pad

    @staticmethod
    def cache_bytes(model: MockModel, capacity: int) -> int:
        return capacity * MOCK_SLOT_BYTES

    @staticmethod
    def vocab_size_of(model: MockModel) -> int:
        return model.vocab_size


FEATURE_WIDTH = 16  # a digest's bytes


def digest_values(digest: bytes) -> np.ndarray:
    return np.frombuffer(digest, np.uint8).astype(np.float32)


def is_digest(values: np.ndarray) -> bool:
    """Whether (FEATURE_WIDTH,) float32 values are a digest's: whole numbers 0 to 255."""
    return values.shape == (FEATURE_WIDTH,) and bool(np.all((values >= 0) & (values <= 255)
                                                            & (values == np.round(values))))


class MockHead:
    """The mock drafter as an EAGLE-3 head: a row's digest is its input digest extended by its token."""

    device = torch.device("cpu")
    dtype = torch.float32

    def __init__(self, model: MockModel) -> None:
        self.model = model
        self.vocab_size = model.vocab_size

    def feature_layers(self, target_layers: int) -> tuple[int, ...]:
        """The mock target's features are its digests, whatever the layer: one layer's."""
        return (0,)


class MockHeadRunner:
    """A MockHead behind the runner interface (models.runner.ModelRunner), as models.eagle3.HeadRunner: each
    row takes a `hidden` (a committed row's features, a tree row's parent output) and leaves its output in
    `outputs`. Its rows need no cache: each is a function of the digest it takes and its token."""

    row_inputs: tuple[str, ...] = ("hidden",)
    ids = None  # drafts over the whole vocabulary
    feature_width = FEATURE_WIDTH

    def __init__(self, head: MockHead, capacity: int) -> None:
        self.head, self.capacity = head, capacity
        self.vocab_size = head.vocab_size
        self.device = head.device
        self.outputs: torch.Tensor | None = None  # (n, FEATURE_WIDTH) the last pass's row digests

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(n, FEATURE_WIDTH) features of any dtype -> (n, FEATURE_WIDTH) float32 digests. The mock target's
        features are digests already, which a committed row takes as they are; a row of other values (not
        whole numbers 0 to 255) takes the digest of their float32 bytes: the rows of some other prefix."""
        values = features.float().numpy()
        digests = [row if is_digest(row) else digest_values(hashlib.blake2b(row.tobytes(), digest_size=16).digest())
                   for row in values]
        return torch.from_numpy(np.stack(digests)) if digests else torch.from_numpy(values)

    def forward(self, tokens: np.ndarray, positions: np.ndarray, slots: np.ndarray, prefix: int,
                cols: np.ndarray, vis: np.ndarray, last_only: bool = False,
                rows: RowInputs | None = None) -> torch.Tensor:
        """tokens: (n,); rows["hidden"]: (n, FEATURE_WIDTH) digests -> (n or 1, V) logits."""
        check_rows(self, rows, len(tokens))
        logits, outs = [], []
        for token, values in zip(np.asarray(tokens).tolist(), rows["hidden"].float().numpy()):
            if not is_digest(values):  # fuse makes a committed row's, and an output is one
                raise MaskError(f"a mock head row takes a digest of {FEATURE_WIDTH} byte values, got {values[:4]}...")
            digest = self.head.model.extend(values.astype(np.uint8).tobytes(), token)
            logits.append(self.head.model.logits(digest))
            outs.append(digest_values(digest))
        self.outputs = torch.from_numpy(np.stack(outs))
        out = torch.from_numpy(np.stack(logits))
        return out[-1:] if last_only else out

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        pass  # no cache

    def synchronize(self) -> None:
        pass

    @classmethod
    def build(cls, model: MockHead, capacity: int, *, graphs: bool, rehearse: bool = False) -> ModelRunner:
        return cls(model, capacity)  # no cache, no graphs: nothing to capture or rehearse

    @staticmethod
    def cache_bytes(model: MockHead, capacity: int) -> int:
        return capacity * MOCK_SLOT_BYTES

    @staticmethod
    def vocab_size_of(model: MockHead) -> int:
        return model.vocab_size
