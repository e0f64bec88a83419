"""Every rule compared at shared contexts (DESIGN.md section 8): values of recorded rounds, their averages
per round and per prompt, paired prompt-bootstrap intervals, and the recording decoder's agreement.

A rule's value at budget B is the expected number of accepted tokens of the tree it would keep, a prefix sum
along one order per round (pipeline.value.Curve). Averages are per round (all rounds pooled) and per prompt (each
prompt's mean first); intervals resample prompts, all rules with the same resamples."""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from evaluation.rounds import RecordedDecode, RecordedRound, decode_key
from pipeline.ahead import hit_probability
from pipeline.config import InputError
from pipeline.rules import RULES
from pipeline.select import select_root
from pipeline.value import CEILINGS, Curve, Scored
from study.selection import FULL, first_agrees, padded, round_curves
from evaluation.stats import resample_counts

BUDGETS = (2, 4, 8, 12, 16, 24, 32, 48, 59, 80, 100, 150, 200)
VALUED = {**{name: rule.value for name, rule in RULES.items() if rule.value is not None}, **CEILINGS}
AGREEMENT_TOKENS = 0.02  # a realized mean this far from its value, beyond its interval, is a bug somewhere
CUT_RULES = ("draft", "root", "root-draw", "pearl")  # valued on pools cut after each level (--cut-pools)


@dataclass(kw_only=True)
class RoundValues:
    """The values of every recorded round at one temperature, rules by name."""

    temperature: float
    budgets: np.ndarray  # (K,) the budgets reported (capped by the largest pool)
    prompt: np.ndarray  # (R,) index into `prompts` of each round's prompt
    prompts: list[str]
    categories: list[str]  # (len(prompts),)
    values: dict[str, np.ndarray]  # rule -> (R, K)
    mean_curves: dict[str, np.ndarray]  # rule -> (N,) mean value per round at every budget 1..N
    off_pool: np.ndarray  # (R,) probability that the draw X1 is not on the pool's first level
    settings: dict[tuple[str, str], dict] = field(default_factory=dict)  # (decoder, budget) -> realized
    record_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (R,) each measurement pass
    # rule (CUT_RULES) -> (R, D, K): the value from the round's pool cut after 1..D levels (cut_values);
    # empty unless evaluate was asked for them
    by_depth: dict[str, np.ndarray] = field(default_factory=dict)
    full: dict[str, np.ndarray] = field(default_factory=dict)  # FULL's curves, per prompt: (P, N) sums
    position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (R,) output tokens before it
    entropy: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (R,) the root row's (nan: not recorded)
    first_agree: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # (R,) drafter's top first = target's
    # (R,) the round held its root's exact row from the pass before (`cover`; False where no record says)
    held: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # (R,) how the round's output ended, as its record says: "stop", "length" ("": no record says)
    finish: np.ndarray = field(default_factory=lambda: np.zeros(0, "U6"))
    recorded: list[tuple[str, str]] = field(default_factory=list)  # the settings (decoder, budget) recorded along
    recorded_in: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (R,) index into `recorded`
    depth: int = 0  # the deepest pool

    @property
    def rounds(self) -> int:
        return len(self.prompt)


def evaluate(decodes: Iterable[RecordedDecode], budgets: Sequence[int] = BUDGETS, *,
             cut_levels: bool = False) -> list[RoundValues]:
    """Values of every rule at every recorded round, one RoundValues per temperature (warm-ups left out);
    with cut_levels, also CUT_RULES' values from the pools cut after each level (RoundValues.by_depth)."""
    by_t = by_temperature(decodes)
    return [_at_temperature(t, found, budgets, cut_levels) for t, found in by_t.items()]


def by_temperature(decodes: Iterable[RecordedDecode]) -> dict[float, list[RecordedDecode]]:
    """The timed decodes with rounds, by temperature (ascending), each list in an order that does not depend
    on how the run was split into shards or resumed; InputError when there is none."""
    by_t: dict[float, list[RecordedDecode]] = {}
    for d in sorted(decodes, key=lambda d: _order(decode_key(d.key))):  # the same order however the run was split
        if not d.key.get("warmup", False) and d.rounds:
            by_t.setdefault(float(d.key["temperature"]), []).append(d)
    if not by_t:
        raise InputError("the runs hold no recorded round (only warm-ups, or only plain rounds)")
    return {t: by_t[t] for t in sorted(by_t)}


@dataclass(slots=True)
class PerRound:
    """Named figures of every round of one temperature's decodes (columns: `budgets`, or any other labels),
    the rows Averages sums by prompt: each section's own figures in the same prompt order as the others'."""

    temperature: float
    budgets: np.ndarray  # (K,) column labels
    prompt: np.ndarray  # (R,) index into `prompts` of each round's prompt
    prompts: list[str]
    categories: list[str]  # (len(prompts),)
    values: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (R, K)

    @classmethod
    def of(cls, temperature: float, decodes: Sequence[RecordedDecode], budgets) -> PerRound:
        """The rounds of `decodes` (as by_temperature orders them), no figures yet."""
        prompts: dict[str, int] = {}
        categories, prompt_of = [], []
        for d in decodes:
            pid = str(d.key["prompt_id"])
            if pid not in prompts:
                prompts[pid] = len(prompts)
                categories.append(str(d.key.get("category", "")))
            prompt_of += [prompts[pid]] * len(d.rounds)
        return cls(temperature, np.asarray(budgets), np.array(prompt_of, np.int64), list(prompts), categories)

    @property
    def rounds(self) -> int:
        return len(self.prompt)


def _order(key: tuple) -> tuple:
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in key)


def _at_temperature(temperature: float, decodes: list[RecordedDecode], budgets: Sequence[int],
                    cut_levels: bool) -> RoundValues:
    collect = _Collect(decodes, budgets, cut_levels)
    for d in decodes:
        collect.decode(d)
    return collect.result(temperature)


class _Collect:
    """One temperature's rounds, figure by figure: each rule's value and the selection figures
    (study.selection) at the reported budgets, FULL's curves summed per prompt at every budget."""

    def __init__(self, decodes: list[RecordedDecode], budgets: Sequence[int], cut_levels: bool) -> None:
        self.largest = max(len(r.pool) for d in decodes for r in d.rounds)
        self.depth = max(int(r.pool.depth.max()) for d in decodes for r in d.rounds)
        self.kept = np.array(sorted({min(int(b), self.largest) for b in budgets}), np.int64)
        self.cut_levels = cut_levels
        self.prompts: dict[str, int] = {}
        self.categories: list[str] = []
        self.rows: dict[str, list[np.ndarray]] = {}
        self.full: dict[str, list[np.ndarray]] = {name: [] for name in FULL}  # each prompt's sum, in prompt order
        self.per_round: dict[str, list] = {name: [] for name in ("prompt", "off_pool", "seconds", "position",
                                                                  "first_agree", "entropy", "held", "recorded_in", "finish")}
        self.recorded: dict[tuple[str, str], int] = {}  # each recording setting's index, in the order first read
        self.by_depth: dict[str, list[np.ndarray]] = {name: [] for name in CUT_RULES}
        self.settings: dict[tuple[str, str], dict] = {}

    def decode(self, d: RecordedDecode) -> None:
        pid = str(d.key["prompt_id"])
        if pid not in self.prompts:
            self.prompts[pid] = len(self.prompts)
            self.categories.append(str(d.key.get("category", "")))
        name = (d.key["decoder"], str(d.key.get("grid_budget", d.key["budget"])))
        setting = self.settings.setdefault(name, {"realized": [], "expected": [], "prompt": [], "predicted": []})
        recorded_in = self.recorded.setdefault(name, len(self.recorded))
        own = VALUED.get(d.key["decoder"])
        held = d.held if d.held is not None else np.zeros(len(d.rounds), bool)
        for rnd, holds in zip(d.rounds, held, strict=True):
            curves = self.round(rnd, self.prompts[pid])
            self.per_round["held"].append(bool(holds))
            self.per_round["recorded_in"].append(recorded_in)
            self.per_round["finish"].append(d.finish)
            if own is not None and rnd.budget > 0:
                setting["realized"].append(rnd.accepted)
                setting["expected"].append(float(curves[d.key["decoder"]].at([rnd.budget])[0]))
                setting["prompt"].append(self.prompts[pid])
                setting["predicted"].append(prediction_hit(rnd, rnd.scored(), d.key["decoder"]))

    def round(self, rnd: RecordedRound, prompt: int) -> dict[str, Curve]:
        scored = rnd.scored()
        curves: dict[str, Curve] = {name: value(scored) for name, value in VALUED.items()}
        n = len(scored.pool)
        figures = {name: curve.at(np.arange(1, n + 1)) for name, curve in curves.items()}
        figures.update(round_curves(scored, curves, self.depth))
        for name, curve in figures.items():
            curve = padded(curve, self.largest)
            self.rows.setdefault(name, []).append(curve[self.kept - 1])
            if name in self.full:
                sums = self.full[name]
                if prompt == len(sums):
                    sums.append(np.zeros(self.largest))
                sums[prompt] += curve
        if self.cut_levels:
            for name, values in cut_values(scored, self.kept, curves).items():
                self.by_depth[name].append(values)
        for name, value in (("prompt", prompt), ("off_pool", scored.off_pool), ("seconds", rnd.seconds),
                            ("position", rnd.position), ("entropy", rnd.root_entropy),
                            ("first_agree", first_agrees(scored, rnd.root_argmax))):
            self.per_round[name].append(value)
        return curves

    def result(self, temperature: float) -> RoundValues:
        r = self.per_round
        prompt = np.array(r["prompt"], np.int64)
        full = {name: np.stack(v) for name, v in self.full.items()}  # (P, N)
        settings = {k: {name: np.array(v) for name, v in s.items()} for k, s in self.settings.items() if s["realized"]}
        return RoundValues(temperature=temperature, budgets=self.kept, prompt=prompt, prompts=list(self.prompts),
                           categories=self.categories, values={name: np.array(v) for name, v in self.rows.items()},
                           mean_curves={name: v.sum(0) / len(prompt) for name, v in full.items() if name in VALUED},
                           off_pool=np.array(r["off_pool"]), settings=settings, record_seconds=np.array(r["seconds"]),
                           by_depth={name: _padded(v) for name, v in self.by_depth.items() if v}, full=full,
                           position=np.array(r["position"], np.int64), entropy=np.array(r["entropy"], np.float64),
                           first_agree=np.array(r["first_agree"], bool), held=np.array(r["held"], bool),
                           finish=np.array(r["finish"], "U6"),
                           recorded=list(self.recorded), recorded_in=np.array(r["recorded_in"], np.int64),
                           depth=self.depth)


def cut_values(scored: Scored, budgets: np.ndarray, whole: dict[str, Curve]) -> dict[str, np.ndarray]:
    """Each of CUT_RULES' values at `budgets` (K,) from the round's pool cut after 1..D levels, D its depth
    (what --cut-pools sends when the target asks after that many) -> rule -> (D, K). `whole`: the rules'
    curves on the whole pool."""
    pool = scored.pool
    depth = int(pool.depth.max())
    out = {name: np.empty((depth, len(budgets))) for name in CUT_RULES}
    for d in range(1, depth + 1):
        if d < depth:
            cut = Scored(pool.first_levels(d), scored.edge[pool.depth <= d])
            curves = {name: VALUED[name](cut) for name in CUT_RULES}
        else:
            curves = whole
        for name in CUT_RULES:
            out[name][d - 1] = curves[name].at(budgets)
    return out


def _padded(per_round: list[np.ndarray]) -> np.ndarray:
    """(R, D, K) from rounds' (D_r, K): a round's pool shallower than the deepest keeps its whole value."""
    depth = max(v.shape[0] for v in per_round)
    return np.stack([np.concatenate([v, np.repeat(v[-1:], depth - v.shape[0], 0)]) for v in per_round])


def prediction_hit(rnd: RecordedRound, scored: Scored, decoder: str) -> float:
    """The probability that drafting ahead's prediction (pipeline.ahead) was right in this recorded round of
    `decoder`: the tree it verified, rebuilt from the pool, its budget and its first token, and the target's
    edges along the predicted end. NaN when the prediction ends beyond the pool's expanded candidates (the
    drafter's next token there is not recorded). The round's first token stands for the draw X1: it was
    drawn from the target's root law, so means over rounds are unbiased."""
    rule, pool, first = RULES[decoder], scored.pool, int(rnd.emitted[0])
    if decoder == "root":  # its first-level factors are the root row's probabilities: the first-level edges
        tree = select_root(pool, rnd.budget, np.where(pool.parent < 0, scored.edge, 0.0))
    else:
        tree = rule.select(pool, rnd.budget, _Draw(first) if rule.root_pass else None)
    if rule.root_pass and tree.child(-1, first) < 0:
        return math.nan  # the draw is off the tree: no tree pass, and nothing predicted
    p = hit_probability(pool, tree, first if rule.root_pass else None, scored.edge)
    return math.nan if p is None else p


@dataclass(frozen=True, slots=True)
class _Draw:
    token: int  # the selections that take a draw read only its token


# -- averages and intervals ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    low: float
    high: float


def prompt_resamples(n_prompts: int, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, n_prompts) how often each prompt is drawn in each resample, from `seed`."""
    return resample_counts(np.random.default_rng(seed), n_resamples, n_prompts)


class Averages:
    """Per-prompt totals of one temperature's values (optionally one group of prompts), and the statistics
    built from them with one set of prompt resamples."""

    def __init__(self, rv: RoundValues | PerRound, *, prompts: np.ndarray | None = None, n_resamples: int = 2000,
                 confidence: float = 0.95, seed: int = 0) -> None:
        chosen = np.arange(len(rv.prompts)) if prompts is None else np.asarray(prompts)
        at = np.full(len(rv.prompts), -1)
        at[chosen] = np.arange(len(chosen))
        keep = at[rv.prompt] >= 0
        where = at[rv.prompt[keep]]
        totals = {name: by_prompt(v[keep], where, len(chosen)) for name, v in rv.values.items()}  # (P, K)
        off_pool = getattr(rv, "off_pool", np.zeros(len(rv.prompt)))
        self._start(totals, np.bincount(where, minlength=len(chosen)), rv.budgets, n_resamples, confidence, seed)
        self.off_pool = by_prompt(off_pool[keep, None], where, len(chosen))[:, 0]

    @classmethod
    def of_totals(cls, totals: dict[str, np.ndarray], rounds: np.ndarray, *, n_resamples: int = 2000,
                  confidence: float = 0.95, seed: int = 0) -> Averages:
        """Averages of figures already summed by prompt: totals name -> (P, K), rounds (P,) the rounds of each prompt,
        in the prompt order of PerRound.of (so that the resamples are those of the other figures of the same rounds)."""
        out = cls.__new__(cls)
        columns = next(iter(totals.values())).shape[1]
        out._start(dict(totals), rounds, np.arange(columns), n_resamples, confidence, seed)
        out.off_pool = np.zeros(len(out.rounds))
        return out

    def _start(self, totals: dict[str, np.ndarray], rounds: np.ndarray, budgets: np.ndarray, n_resamples: int,
               confidence: float, seed: int) -> None:
        self.totals, self.budgets = totals, budgets
        self.rounds = np.asarray(rounds, np.float64)  # (P,)
        if np.any(self.rounds == 0):
            raise InputError("a prompt without recorded rounds")
        self.n_prompts = len(self.rounds)
        self.counts = prompt_resamples(self.n_prompts, n_resamples, seed)
        self.tail = (1 - confidence) / 2
        self.resampling = dict(n_resamples=n_resamples, confidence=confidence, seed=seed)  # the same resamples again

    def per_round(self, rule: str) -> np.ndarray:
        """(K,) mean value per round, rounds pooled."""
        return self.totals[rule].sum(0) / self.rounds.sum()

    def per_prompt(self, rule: str) -> np.ndarray:
        """(K,) mean over prompts of each prompt's mean value per round."""
        return (self.totals[rule] / self.rounds[:, None]).mean(0)

    def gain(self, a: str, b: str, *, prompt_first: bool = False) -> list[Estimate]:
        """Per budget, value_a / value_b - 1 with its percentile interval."""
        return self._ratio(self._stat(a, prompt_first), self._stat(b, prompt_first), minus_one=True)

    def share(self, rule: str, floor: str, ceiling: str) -> list[Estimate]:
        """Per budget, the share of the ceiling's advantage over `floor` that `rule` recovers."""
        f = self.totals[floor]
        advantage = self.totals[ceiling] - f
        out = self._ratio(self.totals[rule] - f, advantage)
        none = np.abs(advantage.sum(0)) <= 1e-9 * np.abs(f.sum(0)).clip(min=1.0)  # no advantage (the whole pool)
        return [Estimate(math.nan, math.nan, math.nan) if n else e for e, n in zip(out, none)]

    def ratio(self, num: str, den: str) -> list[Estimate]:
        """Per column, the sum of one figure over rounds and prompts over another's, with its interval."""
        return self._ratio(self.totals[num], self.totals[den])

    def mean(self, name: str) -> list[Estimate]:
        """Per column, the mean of a figure per round (rounds pooled), with its interval."""
        return self._ratio(self.totals[name], self.rounds[:, None])

    def mean_difference(self, a: str, b: str) -> list[Estimate]:
        """Per column, the mean per round of figure a less figure b (rounds pooled), with its interval."""
        return self._ratio(self.totals[a] - self.totals[b], self.rounds[:, None])

    def difference(self, a: tuple[str, str], b: tuple[str, str]) -> list[Estimate]:
        """Per column, ratio a minus ratio b (each a (numerator, denominator) of figures' sums, as `ratio`),
        with its interval from the same resamples."""
        (na, da), (nb, db) = ([self.totals[name] for name in pair] for pair in (a, b))
        with np.errstate(divide="ignore", invalid="ignore"):
            point = na.sum(0) / da.sum(0) - nb.sum(0) / db.sum(0)
            boot = (self.counts @ na) / (self.counts @ da) - (self.counts @ nb) / (self.counts @ db)
        return self._interval(point, boot)

    def off_pool_share(self) -> Estimate:
        """The expected share of rounds whose draw X1 is not on the pool's first level."""
        num, den = self.off_pool[:, None], self.rounds[:, None]
        return self._ratio(num, den)[0]

    def _stat(self, rule: str, prompt_first: bool) -> np.ndarray:
        return self.totals[rule] / self.rounds[:, None] if prompt_first else self.totals[rule]

    def _ratio(self, num: np.ndarray, den: np.ndarray, minus_one: bool = False) -> list[Estimate]:
        """Per column, sum(num) / sum(den) over prompts, and its resampled interval."""
        shift = 1.0 if minus_one else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            point = num.sum(0) / den.sum(0) - shift
            boot = (self.counts @ num) / (self.counts @ den) - shift  # (n_resamples, K)
        return self._interval(point, boot)

    def _interval(self, point: np.ndarray, boot: np.ndarray) -> list[Estimate]:
        """Per column, the point (K,) with the percentile interval of its resamples (n_resamples, K)."""
        boot[~np.isfinite(boot)] = np.nan  # a resample whose denominator is 0 (no advantage to share) says nothing
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a column of such resamples: no interval
            low, high = np.nanquantile(boot, [self.tail, 1 - self.tail], axis=0)
        return [Estimate(float(p), float(lo), float(hi)) for p, lo, hi in zip(point, np.atleast_1d(low),
                                                                              np.atleast_1d(high))]


def by_prompt(values: np.ndarray, where: np.ndarray, n: int) -> np.ndarray:
    """(n, K) sums of (R, K) round values by prompt."""
    out = np.zeros((n, values.shape[1]))
    np.add.at(out, where, values)
    return out


def reach(curves: dict[str, np.ndarray], rule: str, target: str, budget: int = 8) -> int | None:
    """The smallest budget at which `rule`'s mean value per round reaches `target`'s at `budget` (searching
    every budget up to the pool), or None when even the whole pool falls short (the paper's Table 13)."""
    goal = curves[target][min(budget, len(curves[target])) - 1]
    hit = np.flatnonzero(curves[rule] >= goal - 1e-12)
    return int(hit[0]) + 1 if len(hit) else None


@dataclass(frozen=True, slots=True)
class Agreement:
    """The recording decoder's realized acceptance per round against its value on the same rounds."""

    decoder: str
    budget: str
    rounds: int
    realized: float
    expected: float
    difference: Estimate
    ahead: float = math.nan  # the mean probability that drafting ahead's prediction was right (prediction_hit)
    ahead_rounds: int = 0  # the rounds that mean is over

    @property
    def disagrees(self) -> bool:
        d = self.difference
        return abs(d.value) > AGREEMENT_TOKENS and not (d.low <= 0.0 <= d.high)


def agreement(rv: RoundValues, confidence: float = 0.95) -> list[Agreement]:
    """Per recorded decoder setting, realized minus expected accepted tokens per round, with a normal
    interval. Given a round's context, its realized acceptance minus its value has mean zero (whatever the
    rounds before did), so the differences are martingale differences: the mean's standard error is
    sqrt(sum d^2) / n over rounds, valid with few prompts, where a prompt bootstrap would not be."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    out = []
    for (decoder, budget), s in sorted(rv.settings.items()):
        d = s["realized"] - s["expected"]
        n = len(d)
        half = z * float(np.sqrt(np.sum(d * d))) / n
        mean = float(d.mean())
        predicted = s.get("predicted", np.zeros(0))
        known = predicted[~np.isnan(predicted)]
        out.append(Agreement(decoder, budget, n, float(s["realized"].mean()), float(s["expected"].mean()),
                             Estimate(mean, mean - half, mean + half),
                             float(known.mean()) if len(known) else math.nan, len(known)))
    return out
