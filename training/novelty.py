"""Which made prompts to keep: none twice (exactly, or nearly: sharing a run of NEAR words), none degenerate
(too short, too long, repeating itself), and none that shares a run of EVAL_NGRAM words with, or equals, a
prompt of a set this project evaluates on.

Texts are compared as lower-case words (runs of letters and digits), so that spacing, case and punctuation
do not hide a copy. The checks keep hashes of word runs, not texts: a million prompts' runs fit in memory."""

from __future__ import annotations

import re

NEAR = 10  # words in a run two kept prompts may not share
EVAL_NGRAM = 8  # words in a run a kept prompt may not share with an evaluated prompt
MIN_WORDS = 4
MAX_CHARS = 4000
REPEAT_SHARE = 0.6  # a text of 12 word triples or more repeats itself where fewer of them are distinct
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def runs(ws: list[str], n: int) -> set[int]:
    """Hashes of the runs of `n` consecutive words in `ws` (none for a shorter text)."""
    return {hash(tuple(ws[i: i + n])) for i in range(len(ws) - n + 1)}


def degenerate(text: str) -> str | None:
    """Why `text` is no prompt to train on (None: it is one): too short, too long, or repeating itself."""
    ws = words(text)
    if len(ws) < MIN_WORDS:
        return "too short"
    if len(text) > MAX_CHARS:
        return "too long"
    triples = [tuple(ws[i: i + 3]) for i in range(len(ws) - 2)]
    if len(triples) >= 12 and len(set(triples)) < REPEAT_SHARE * len(triples):
        return "repeating"
    return None


class Novelty:
    """The prompts kept so far and the evaluated ones: keep(text) says whether a new one may join them."""

    def __init__(self, evaluated: list[str]) -> None:
        self.evaluated = {" ".join(words(t)) for t in evaluated}
        self.evaluated_runs = set().union(*(runs(words(t), EVAL_NGRAM) for t in evaluated))
        self.seen: set[str] = set()
        self.seen_runs: set[int] = set()

    def reason(self, text: str, key: str | None = None) -> str | None:
        """Why `text` may not join (None: it may); `key` (default: the text) is what must be new, e.g. the
        passage of a context prompt, whose instruction others share."""
        bad = degenerate(text)
        if bad:
            return bad
        ws, kws = words(text), words(text if key is None else key)
        joined = " ".join(ws)
        if joined in self.evaluated or runs(ws, EVAL_NGRAM) & self.evaluated_runs:
            return "evaluated"
        if " ".join(kws) in self.seen or runs(kws, NEAR) & self.seen_runs:
            return "duplicate"
        return None

    def keep(self, text: str, key: str | None = None) -> bool:
        """Whether `text` joins the kept prompts (and if so, remember it)."""
        if self.reason(text, key) is not None:
            return False
        kws = words(text if key is None else key)
        self.seen.add(" ".join(kws))
        self.seen_runs |= runs(kws, NEAR)
        return True


def evaluated_texts(sources: list[str]) -> list[str]:
    """Every user turn of `sources` (evaluation.prompts' sources: builtin, humaneval, spec-bench:PATH, files),
    later turns too. Raises ValueError naming a source that cannot be read."""
    from evaluation.prompts import PromptError, load_prompts

    try:
        return [t for s in sources for p in load_prompts(s) for t in p.turns]
    except PromptError as e:
        raise ValueError(str(e)) from None
