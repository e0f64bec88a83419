"""Recorded rounds (DESIGN.md section 8): what a round of a recorded decode keeps, and the one encoding of a
decode's rounds as a chunk payload, validated field by field when it is read.

Per round: the budget, the tree nodes accepted, the tokens emitted (the round's draw at the root first), the
pool with the target's probability of every pool edge at the run's temperature, and figures of the round's root
row and of the rows retained from the round before (RetainedRows), never whole rows. A payload is a msgpack map
whose arrays are raw little-endian bytes laid end to end over the rounds; schemas 1 and 2 are still read.
Reading checks every field and what the rounds' physics allows before any arithmetic sees it, so a damaged or
impossible chunk is one DamagedRounds naming what is wrong."""

from __future__ import annotations

import math
from dataclasses import dataclass

import msgpack
import numpy as np

from evaluation.record import DecodeRecord
from pipeline.config import InputError, is_int
from pipeline.pool import ROOT, InvalidPool, Pool
from pipeline.value import Scored

SCHEMA = 3
READABLE = (1, 2, 3)
MAX_ROUNDS = 1 << 24  # rounds in one decode's chunk: far beyond a real decode, small enough to refuse garbage
MAX_POOL = 1 << 20  # candidates in one round's pool
MAX_ROWS = 64  # retained rows of one round (1 matched, 25 token-only, cache, same-token, preceding)
PROBABILITY_SLACK = 1e-5  # a probability computed in float32 may pass 1 by rounding
SUM_SLACK = 1e-4  # ... and a sum of a node's children's (at most a pool's topk of them) by a little more
# The entropy of a row over V tokens lies in [0, log V]; tokens are int32, so V < 2^31 (a run's identity
# knows its V and bounds it closer: evaluation.run_identity)
MAX_ENTROPY = math.log(2 ** 31) + 1e-3
# The rows a round retains for the next (Appendix C of the paper): the row at the emitted address when a pass
# scored it, rows at other scored addresses ending in the continuation token, the token-keyed cache's row for
# it, the same-token row and the row that generated the continuation (its probability of it zeroed).
ROW_KINDS = ("matched", "token-only", "cache", "same-token", "preceding")


class DamagedRounds(InputError):
    """A rounds file, or a chunk of one, that does not hold what a recording writes."""


@dataclass(slots=True, kw_only=True)
class RetainedRows:
    """The rows a round retained for the next one, each reduced against the next round's root row.
    kind: (n,) int index into ROW_KINDS; tv: (n,) float32 total variation from the next root row over the whole
    vocabulary; agree: (n,) bool, the two argmaxes agree; on_path: (n,) bool, a token-only row at a prefix of the
    accepted path (the root included); age: (n,) int, rounds since a cache row was stored (-1 for the other kinds);
    logp: (n, k) float32 log-probabilities at the next round's k first-level tokens."""

    kind: np.ndarray
    tv: np.ndarray
    agree: np.ndarray
    on_path: np.ndarray
    age: np.ndarray
    logp: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)

    def of(self, kind: str) -> np.ndarray:
        """Indices of the rows of one kind."""
        return np.flatnonzero(self.kind == ROW_KINDS.index(kind))


def no_rows(k: int) -> RetainedRows:
    return RetainedRows(kind=np.zeros(0, np.int64), tv=np.zeros(0, np.float32), agree=np.zeros(0, bool),
                        on_path=np.zeros(0, bool), age=np.zeros(0, np.int64), logp=np.zeros((0, k), np.float32))


@dataclass(slots=True, kw_only=True)
class RecordedRound:
    """One round of a decode, as recorded: enough to give every rule the same pool, and (schema 2) the
    figures of its root row and of the rows retained from the round before."""

    budget: int  # the tree size cap this round ran with
    accepted: int  # tree nodes the verifier accepted (a drawn first token that is a tree node counts)
    emitted: np.ndarray  # (accepted + 1,) int64: the accepted path and the continuation
    pool: Pool
    edge: np.ndarray  # (N,) the target's probability of each candidate's edge at the run's temperature
    seconds: float = 0.0  # what the measurement pass and its read-back took (not part of the decode's time)
    root: int = -1  # the round's root token (-1: not recorded, schema 1)
    position: int = -1  # output tokens before this round
    root_argmax: int = -1  # the target's most probable token at the root
    root_entropy: float = math.nan  # entropy (nats) of the root row's softmax (at T = 1 when greedy)
    first_soft: np.ndarray | None = None  # (k,) that softmax at the first-level candidates, in pool order
    own_tv: float = math.nan  # the decoder's own root row against the measurement pass's: total variation
    own_agree: int = -1  # ... and whether their argmaxes agree (1, 0; -1 not recorded)
    prefix_root: int = -1  # nodes of the round before's tree whose token is this round's root token
    rows: RetainedRows | None = None

    @property
    def token(self) -> np.ndarray:
        return self.pool.token

    @property
    def parent(self) -> np.ndarray:
        return self.pool.parent

    @property
    def first(self) -> np.ndarray:
        """(k,) pool indices of the first-level candidates."""
        return np.flatnonzero(self.pool.parent == ROOT)

    def scored(self) -> Scored:
        return Scored(self.pool, self.edge)


@dataclass(slots=True)
class RecordedDecode:
    key: dict  # prompt_id, category, turn, decoder, temperature, budget, seed (+ a sweep's grid_budget, warmup...)
    rounds: list[RecordedRound]
    prompt_tokens: int = -1  # tokens of the context the decode continued (-1: not recorded)
    # (len(rounds),) bool: each round held its root's exact row from the pass before (`cover`), joined from the
    # decode's record (evaluation.held_rows; the payload does not hold it); None: no record says
    held: np.ndarray | None = None
    finish: str = ""  # how the output ended, from the decode's record: "stop", "length" ("": no record says)


# -- the chunk payload --------------------------------------------------------------------------------------

# Arrays of a schema-2 payload by what they run over, with their stored dtype and the values they may hold.
PER_ROUND = {"budget": "<i4", "accepted": "<i4", "seconds": "<f4", "pool_size": "<i4", "root": "<i4",
             "position": "<i4", "root_argmax": "<i4", "root_entropy": "<f4", "own_tv": "<f4", "own_agree": "<i1",
             "prefix_root": "<i4", "rows_n": "<i2"}
PER_CANDIDATE = {"token": "<i4", "parent": "<i4", "logp": "<f4", "edge": "<f4"}  # and `expanded`, bit-packed
PER_ROW = {"row_kind": "<u1", "row_tv": "<f4", "row_agree": "<u1", "row_on_path": "<u1", "row_age": "<i4"}
KEY_TYPES = {"prompt_id": str, "category": str, "turn": int, "decoder": str, "temperature": float, "seed": int}


def encode_decode(key: dict, rounds: list[RecordedRound], prompt_tokens: int = -1, run: dict | None = None) -> bytes:
    """One decode's chunk payload (schema 3, with `run` the identity of the run writing it)."""
    def raw(values, dtype: str) -> bytes:
        return np.asarray(values, dtype).tobytes()

    def cat(parts, dtype: str) -> bytes:
        return np.concatenate([np.asarray(p).ravel() for p in parts]).astype(dtype).tobytes() if parts else b""

    rows = [r.rows or no_rows(len(r.first)) for r in rounds]
    body = {"kind": "decode", "schema": SCHEMA, "key": key, "prompt_tokens": int(prompt_tokens), "run": run,
            "rounds": len(rounds), "emitted": cat([r.emitted for r in rounds], "<i4"),
            "expanded": np.packbits(np.concatenate([r.pool.expanded for r in rounds])).tobytes() if rounds else b"",
            "first_soft": cat([r.first_soft if r.first_soft is not None else np.full(len(r.first), np.nan)
                               for r in rounds], "<f4"),
            "row_logp": cat([x.logp for x in rows], "<f4")}
    scalars = {"budget": [r.budget for r in rounds], "accepted": [r.accepted for r in rounds],
               "seconds": [r.seconds for r in rounds], "pool_size": [len(r.pool) for r in rounds],
               "root": [r.root for r in rounds], "position": [r.position for r in rounds],
               "root_argmax": [r.root_argmax for r in rounds], "root_entropy": [r.root_entropy for r in rounds],
               "own_tv": [r.own_tv for r in rounds], "own_agree": [r.own_agree for r in rounds],
               "prefix_root": [r.prefix_root for r in rounds], "rows_n": [len(x) for x in rows]}
    body.update({name: raw(scalars[name], dtype) for name, dtype in PER_ROUND.items()})
    body.update({name: cat([getattr(r.pool, name) if name != "edge" else r.edge for r in rounds], dtype)
                 for name, dtype in PER_CANDIDATE.items()})
    body.update({name: cat([getattr(x, name[4:]) for x in rows], dtype) for name, dtype in PER_ROW.items()})
    return msgpack.packb(body, use_bin_type=True)


def unpack(payload: bytes, where: str) -> dict:
    """A chunk payload's msgpack map, checked to be a chunk of a readable schema."""
    try:
        body = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise DamagedRounds(f"{where}: not a msgpack map ({e})") from None
    if not isinstance(body, dict) or body.get("kind") not in ("run", "decode"):
        raise DamagedRounds(f"{where}: a chunk of unknown kind")
    if body.get("schema") not in READABLE:
        raise DamagedRounds(f"{where}: schema {body.get('schema')!r}; this version reads {READABLE}")
    if body["kind"] == "run" and not isinstance(body.get("provenance"), dict):
        raise DamagedRounds(f"{where}: a run chunk without the run's provenance")
    return body


def decode_chunk(body: dict, where: str) -> RecordedDecode:
    """The decode of an unpacked `kind` decode chunk; DamagedRounds naming `where` and the field at fault."""
    try:
        key = check_key(body.get("key"))
        decode = _decode_v1(body, key) if body["schema"] == 1 else _decode_v2(body, key)
        for i, rnd in enumerate(decode.rounds):
            if problem := impossible(rnd):
                raise ValueError(f"round {i}: {problem}")
        return decode
    except (KeyError, TypeError, ValueError, OverflowError, InvalidPool) as e:
        what = f"decode {key_text(body.get('key'))}" if isinstance(body.get("key"), dict) else "a decode"
        raise DamagedRounds(f"{where} ({what}): {e}") from None


def impossible(rnd: RecordedRound) -> str | None:
    """What a round holds that no recording could, in words (None: nothing): root-row figures missing where the
    round recorded its root row, or held where it did not; a node whose children's edge probabilities sum past
    1, accepted tokens that are not a path of the pool from the root."""
    if problem := _unrecorded(rnd):
        return problem
    sums = np.bincount(rnd.pool.parent + 1, weights=rnd.edge)
    if len(sums) and float(sums.max()) > 1.0 + SUM_SLACK:
        node = int(np.argmax(sums)) - 1
        return (f"the edge probabilities of {'the root' if node == ROOT else f'candidate {node}'}'s children sum "
                f"to {float(sums.max()):.6g}, more than 1")
    if rnd.first_soft is not None and float(np.nansum(rnd.first_soft)) > 1.0 + SUM_SLACK:
        return f"`first_soft` sums to {float(np.nansum(rnd.first_soft)):.6g}, more than 1"
    node = ROOT
    for step, token in enumerate(rnd.emitted[:rnd.accepted].tolist()):
        child = np.flatnonzero((rnd.pool.parent == node) & (rnd.pool.token == token))
        if not len(child) and (step or rnd.accepted > 1):  # a draw off the pool's first level is accepted alone
            return f"accepted token {token} (step {step}) is not a child of its predecessor in the pool"
        node = int(child[0]) if len(child) else ROOT
    return None


def _unrecorded(rnd: RecordedRound) -> str | None:
    """A root row's figures are recorded together (target_proc.recorder): its argmax (-1 when not), the entropy
    and the law at the first-level candidates; the decoder's own-row comparison, its agreement (-1 when not) and
    total variation. One of a pair without the other is no recording's."""
    root_row = rnd.root_argmax >= 0
    if root_row != math.isfinite(rnd.root_entropy):
        return f"`root_entropy` is {rnd.root_entropy!r} where `root_argmax` is {rnd.root_argmax}"
    if rnd.first_soft is not None and len(rnd.first_soft) and root_row != bool(np.isfinite(rnd.first_soft).all()):
        return f"`first_soft` holds {rnd.first_soft.tolist()!r:.60} where `root_argmax` is {rnd.root_argmax}"
    if (rnd.own_agree >= 0) != math.isfinite(rnd.own_tv):
        return f"`own_tv` is {rnd.own_tv!r} where `own_agree` is {rnd.own_agree}"
    return None


def check_key(key) -> dict:
    """A decode chunk's key, its fields of the right types (the records' key, which reports pair on)."""
    if not isinstance(key, dict):
        raise ValueError("its key is not a map")
    for name, kind in KEY_TYPES.items():
        value = key.get(name)
        ok = (is_int(value) or isinstance(value, float)) if kind is float else \
            is_int(value) if kind is int else isinstance(value, kind)
        if not ok:
            raise ValueError(f"key field `{name}` is {value!r}, not {kind.__name__}")
    if not (math.isfinite(key["temperature"]) and key["temperature"] >= 0) or key["seed"] < 0 or key["turn"] < 0:
        raise ValueError("key fields `temperature`, `seed` and `turn` must be finite and non-negative")
    for name in ("budget", "grid_budget"):
        value = key.get(name, 0) if name == "grid_budget" else key.get(name)
        if not (value == "auto" or (is_int(value) and 0 <= value < 1 << 31)):
            raise ValueError(f"key field `{name}` is {value!r}, not a budget")
    if not isinstance(key.get("warmup", False), bool):
        raise ValueError(f"key field `warmup` is {key['warmup']!r}, not true or false")
    return key


def key_text(key: dict) -> str:
    """A decode key in words, for messages."""
    return " ".join(f"{name}={key.get(name)!r:.40}" for name in ("prompt_id", "turn", "decoder", "temperature",
                                                                  "budget", "seed") if name in key)


def decode_key(key: dict) -> tuple:
    """What makes a decode the same decode in any shard (as the records' key); `key` as check_key passed it."""
    budget = key.get("grid_budget", key["budget"])
    return (key["prompt_id"], int(key["turn"]), key["decoder"], float(key["temperature"]),
            budget if isinstance(budget, str) else int(budget), int(key["seed"]), bool(key.get("warmup", False)))


class _Arrays:
    """A payload's raw arrays, each read once, of a checked length and checked values."""

    def __init__(self, body: dict) -> None:
        self.body = body

    def get(self, name: str, dtype: str, length: int, low: float = -math.inf, high: float = math.inf,
            nan: bool = False, inf: bool = False) -> np.ndarray:
        data = self.body[name]
        if not isinstance(data, bytes):
            raise ValueError(f"`{name}` is not raw bytes")
        a = np.frombuffer(data, dtype)  # ValueError when the size is not a multiple of the item's
        if len(a) != length:
            raise ValueError(f"`{name}` holds {len(a)} values where the rounds need {length}")
        values = a[~np.isnan(a)] if nan and a.dtype.kind == "f" else a
        if a.dtype.kind == "f" and not inf and not np.all(np.isfinite(values)):
            raise ValueError(f"`{name}` holds a value that is not finite")
        if len(values) and (np.any(values < low) or np.any(values > high)):
            bad = values[(values < low) | (values > high)][0].item()
            raise ValueError(f"`{name}` holds {bad!r}, outside [{low}, {high}]")
        return a


def _count(body: dict, name: str) -> int:
    n = body[name]
    if not is_int(n) or not 0 <= n <= MAX_ROUNDS:
        raise ValueError(f"`{name}` is {n!r}, not a count of rounds")
    return n


def _pools(arrays: _Arrays, sizes: np.ndarray) -> tuple[list[Pool], np.ndarray]:
    """Each round's pool from the candidate arrays (validated by Pool.from_edges) and the edges, (N,) float64."""
    total = int(sizes.sum())
    token = arrays.get("token", "<i4", total, 0)
    parent = arrays.get("parent", "<i4", total, -1)
    logp = arrays.get("logp", "<f4", total, high=1e-4)
    edge = arrays.get("edge", "<f4", total, 0.0, 1.0 + PROBABILITY_SLACK)
    bits = arrays.body["expanded"]
    if not isinstance(bits, bytes) or len(bits) != (total + 7) // 8:
        raise ValueError("`expanded` does not hold one bit per candidate")
    expanded = np.unpackbits(np.frombuffer(bits, np.uint8))[:total].astype(bool)
    ends = np.cumsum(sizes)
    pools = [Pool.from_edges(token[b - n: b], parent[b - n: b], logp[b - n: b], expanded[b - n: b])
             for n, b in zip(sizes.tolist(), ends.tolist())]
    return pools, np.minimum(edge.astype(np.float64), 1.0)


def _emitted(arrays: _Arrays, accepted: np.ndarray) -> list[np.ndarray]:
    sizes = accepted.astype(np.int64) + 1
    emitted = arrays.get("emitted", "<i4", int(sizes.sum()), 0).astype(np.int64)
    return np.split(emitted, np.cumsum(sizes)[:-1])


def _decode_v1(body: dict, key: dict) -> RecordedDecode:
    """Schema 1: per-round lists, no root-row figures and no retained rows."""
    n = len(body["budget"])
    lists = {name: body[name] for name in ("budget", "accepted", "seconds", "pool_size", "emit_size")}
    if not all(isinstance(v, list) and len(v) == n for v in lists.values()) or n > MAX_ROUNDS:
        raise ValueError("per-round lists of different lengths")
    for name in ("budget", "accepted", "pool_size", "emit_size"):
        if not all(is_int(v) and 0 <= v < 1 << 31 for v in lists[name]):
            raise ValueError(f"`{name}` holds a value that is not a non-negative integer")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in lists["seconds"]):
        raise ValueError("`seconds` holds a value that is not a finite number >= 0")
    sizes = np.array(lists["pool_size"], np.int64)
    accepted = np.array(lists["accepted"], np.int64)
    if np.any(sizes < 1) or np.any(sizes > MAX_POOL) or np.any(np.array(lists["emit_size"]) != accepted + 1):
        raise ValueError("a round's pool or emitted tokens do not match its sizes")
    arrays = _Arrays(body)
    pools, edge = _pools(arrays, sizes)
    emitted = _emitted(arrays, accepted)
    ends = np.cumsum(sizes)
    return RecordedDecode(key, [RecordedRound(budget=lists["budget"][i], accepted=int(accepted[i]), emitted=emitted[i],
                                              pool=pools[i], edge=edge[ends[i] - sizes[i]: ends[i]],
                                              seconds=float(lists["seconds"][i])) for i in range(n)])


def _decode_v2(body: dict, key: dict) -> RecordedDecode:
    n = _count(body, "rounds")
    arrays = _Arrays(body)
    s = {"budget": arrays.get("budget", "<i4", n, 0), "accepted": arrays.get("accepted", "<i4", n, 0),
         "seconds": arrays.get("seconds", "<f4", n, 0.0), "pool_size": arrays.get("pool_size", "<i4", n, 1, MAX_POOL),
         "root": arrays.get("root", "<i4", n, -1), "position": arrays.get("position", "<i4", n, -1),
         "root_argmax": arrays.get("root_argmax", "<i4", n, -1),
         "root_entropy": arrays.get("root_entropy", "<f4", n, 0.0, MAX_ENTROPY, nan=True),
         "own_tv": arrays.get("own_tv", "<f4", n, 0.0, 1.0 + PROBABILITY_SLACK, nan=True),
         "own_agree": arrays.get("own_agree", "<i1", n, -1, 1), "prefix_root": arrays.get("prefix_root", "<i4", n, -1),
         "rows_n": arrays.get("rows_n", "<i2", n, 0, MAX_ROWS)}
    sizes = s["pool_size"].astype(np.int64)
    if np.any(s["accepted"] > sizes):
        raise ValueError("a round accepts more nodes than its pool holds")
    pools, edge = _pools(arrays, sizes)
    emitted = _emitted(arrays, s["accepted"])
    k = np.array([int(np.count_nonzero(p.parent == ROOT)) for p in pools], np.int64)
    first_soft = arrays.get("first_soft", "<f4", int(k.sum()), 0.0, 1.0 + PROBABILITY_SLACK, nan=True)
    rows = _rows(arrays, s["rows_n"].astype(np.int64), k)
    ends, first_ends = np.cumsum(sizes), np.cumsum(k)
    prompt_tokens = body.get("prompt_tokens", -1)
    if not is_int(prompt_tokens) or prompt_tokens < -1:
        raise ValueError(f"`prompt_tokens` is {prompt_tokens!r}")
    rounds = [RecordedRound(
        budget=int(s["budget"][i]), accepted=int(s["accepted"][i]), emitted=emitted[i], pool=pools[i],
        edge=edge[ends[i] - sizes[i]: ends[i]], seconds=float(s["seconds"][i]), root=int(s["root"][i]),
        position=int(s["position"][i]), root_argmax=int(s["root_argmax"][i]),
        root_entropy=float(s["root_entropy"][i]),
        first_soft=first_soft[first_ends[i] - k[i]: first_ends[i]].astype(np.float64),
        own_tv=float(s["own_tv"][i]), own_agree=int(s["own_agree"][i]), prefix_root=int(s["prefix_root"][i]),
        rows=rows[i]) for i in range(n)]
    return RecordedDecode(key, rounds, prompt_tokens)


def _rows(arrays: _Arrays, counts: np.ndarray, k: np.ndarray) -> list[RetainedRows]:
    """Each round's retained rows (counts[i] of them, each with k[i] first-level log-probabilities)."""
    total = int(counts.sum())
    kind = arrays.get("row_kind", "<u1", total, 0, len(ROW_KINDS) - 1).astype(np.int64)
    tv = arrays.get("row_tv", "<f4", total, 0.0, 1.0 + PROBABILITY_SLACK)
    agree = arrays.get("row_agree", "<u1", total, 0, 1).astype(bool)
    on_path = arrays.get("row_on_path", "<u1", total, 0, 1).astype(bool)
    age = arrays.get("row_age", "<i4", total, -1).astype(np.int64)
    logp = arrays.get("row_logp", "<f4", int((counts * k).sum()), high=PROBABILITY_SLACK, inf=True)
    if np.any(np.isnan(logp)) or np.any(np.isposinf(logp)):
        raise ValueError("`row_logp` holds a value that is not a log-probability")
    out, at, at_logp = [], 0, 0
    for c, kk in zip(counts.tolist(), k.tolist()):
        out.append(RetainedRows(kind=kind[at: at + c], tv=tv[at: at + c], agree=agree[at: at + c],
                                on_path=on_path[at: at + c], age=age[at: at + c],
                                logp=logp[at_logp: at_logp + c * kk].reshape(c, kk)))
        at, at_logp = at + c, at_logp + c * kk
    return out


KEY_FIELDS = ("prompt_id", "category", "turn", "decoder", "temperature", "budget", "seed")


def round_key(record: DecodeRecord) -> dict:
    """The key a decode's rounds are stored under, from its record (a sweep adds where it ran)."""
    return {name: getattr(record, name) for name in KEY_FIELDS}
