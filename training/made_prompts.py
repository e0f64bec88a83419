"""Prompts the target writes, and prompts that hand it a passage of this machine's texts (docs/training.md).

Written prompts (as Magpie makes them): the chat template opened at the user's turn, the target writes the
user's message at T = 1, ROUND at a time (one file a round in the work folder), a message not closed within
MAX_TOKENS dropped. Passage prompts hand the target a passage of training.passages with an instruction of
training.prompts' CONTEXT. Both keep what training.novelty keeps, in a fixed order: the same for the same seed,
and a larger count keeps the same first prompts."""

from __future__ import annotations

import json
import random
from pathlib import Path

from training.files import written
from training.novelty import Novelty
from training.prompts import CODE, CONTEXT, EXPLAIN, HOWTO, LANGUAGES, ROLES, SUBJECTS, TRANSLATE, WRITING

ROUND = 128  # messages written per round (one file)
MAX_TOKENS = 128  # a written message's tokens at most; one not closed by then is dropped
TASK_WORDS = tuple(sorted({t.split()[0] for t in WRITING + EXPLAIN + ROLES + HOWTO + CODE + TRANSLATE}))
TOPICS = SUBJECTS + LANGUAGES


def user_turn(tokenizer) -> tuple[list[int], tuple[int, ...]]:
    """-> (the ids of the chat template up to the user's message, the ids that end the message). Raises
    ValueError for a tokenizer without a chat template (its user turn cannot be opened)."""
    a, b = tokenizer.chat_ids(["Alpha beta"]), tokenizer.chat_ids(["Zulu"])
    head = next(i for i, (x, y) in enumerate(zip(a + [None], b + [-1])) if x != y)
    tail = next(i for i, (x, y) in enumerate(zip(a[::-1] + [None], b[::-1] + [-1])) if x != y)
    if head == 0 or tail == 0:
        raise ValueError("the target's tokenizer has no chat template: its user turn cannot be opened to write "
                         "prompts (--made-prompts)")
    return a[:head], tuple(sorted(set(tokenizer.eos) | {a[len(a) - tail]}))


def opening(rng: random.Random) -> str:
    """How a written message starts: nothing, a task word ("Write", "Explain", ...) or a topic."""
    kind = rng.randrange(3)
    topic = rng.choice(TOPICS)
    return ("", rng.choice(TASK_WORDS), topic[0].upper() + topic[1:])[kind]


def text_ids(tokenizer, text: str) -> list[int]:
    """`text`'s ids with no special token added (a transformers tokenizer's, or the mock's)."""
    tok = getattr(tokenizer, "tok", None)
    return list(tok(text, add_special_tokens=False)["input_ids"]) if tok is not None else tokenizer.text_ids(text)


def write_round(model, tokenizer, index: int, seed: int) -> list[str | None]:
    """Round `index`'s ROUND messages, None for one not closed within MAX_TOKENS."""
    from training.batched import answer_all

    header, ends = user_turn(tokenizer)
    rng = random.Random(seed * 1_000_003 + index)
    asked = [header + text_ids(tokenizer, opening(rng)) for _ in range(ROUND)]
    answers = answer_all(model, asked, sample=True, max_new=MAX_TOKENS, end_ids=ends, layers=(),
                         seed=seed * 7_919 + index)
    return [tokenizer.decode(a.tokens[len(header):-1].tolist()).strip() if int(a.tokens[-1]) in ends else None
            for a in answers]


def read_texts(path: Path) -> list[str | None]:
    """A file of made prompts (a JSON list of texts, None for a dropped one); ValueError naming a damaged one."""
    try:
        texts = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a list of made prompts ({e}); delete it to make them again") from None
    if not isinstance(texts, list) or not all(t is None or isinstance(t, str) for t in texts):
        raise ValueError(f"{path}: not a list of made prompts (texts); delete it to make them again")
    return texts


def written_prompts(model, tokenizer, count: int, seed: int, work: Path, novelty: Novelty, bar=None) -> list[str]:
    """`count` prompts the target writes, rounds kept in `work`/made (read back where written)."""
    kept, rounds = [], 0
    while len(kept) < count:
        if rounds > 10 + 4 * count // ROUND:  # a quarter of the messages kept at the least
            raise ValueError(f"the target wrote only {len(kept)} usable prompts in {rounds} rounds of {ROUND}; "
                             f"ask for fewer than {count}")
        path = work / "made" / f"round-{rounds:04d}.json"
        if path.exists():
            texts = read_texts(path)
        else:
            texts = write_round(model, tokenizer, rounds, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            with written(path) as partial:
                partial.write_text(json.dumps(texts, ensure_ascii=False))
        before = len(kept)
        for t in texts:
            if t is not None and len(kept) < count and novelty.keep(t):
                kept.append(t)
        if bar is not None:
            bar.update(len(kept) - before)
        rounds += 1
    return kept


def passage_prompts(passages: list[str], count: int, seed: int, novelty: Novelty) -> list[str]:
    """`count` prompts, each a passage of `passages` (in a seeded order, each once, near copies left out) in an
    instruction of CONTEXT."""
    order = list(range(len(passages)))
    rng = random.Random(seed)
    rng.shuffle(order)
    kept = []
    for i in order:
        text = rng.choice(CONTEXT).format(x=passages[i])
        if novelty.keep(text, key=passages[i]):
            kept.append(text)
            if len(kept) == count:
                return kept
    raise ValueError(f"this machine's texts give {len(kept)} distinct passage prompts, fewer than the {count} "
                     f"asked for")
