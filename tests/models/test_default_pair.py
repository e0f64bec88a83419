"""The embedded default pair (SmolLM2-135M-Instruct and its int8 copy) through the real runners."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drafter_proc.drafter import Drafter
from models.load import load
from models.options import ModelOptions
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from target_proc.target import Target
from tests.local_drafter import LocalDrafter
from tests.models.test_tree_pass import TOL, path_context, random_tree, reference_rows

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _every_core():
    """The real model's passes take every core here (the suite runs single-threaded for its mock tensors)."""
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target_model():
    return load(ModelOptions(), "target")


@pytest.fixture(scope="module")
def drafter_model():
    return load(ModelOptions(model="smollm2:int8"), "drafter")


def test_default_model_tree_rows_equal_sequential_rows(target_model):
    rng = np.random.default_rng(0)
    prompt = target_model.tokenizer.prompt_ids("Name three rivers in Europe.")
    target = Target(target_model.runner(512))
    target.prefill(prompt[:-1])
    tree = random_tree(rng, 10)
    rows = target.tree_pass(tree, prompt[-1])
    want = reference_rows(target_model.model, [prompt] + [path_context(prompt, tree, i) for i in range(len(tree))])
    # The real model's logits reach about 30, and a masked pass sums in another order than the sequential
    # one: float32 rounding leaves about 1e-4 (relative 3e-6); a mask error moves a row by whole units.
    assert (rows - want).abs().max() < 10 * TOL


def plain_greedy(model, ids: list[int], eos: frozenset[int], n: int) -> list[int]:
    """The target's greedy continuation from plain full forwards of the transformers model (no cache)."""
    out: list[int] = []
    with torch.inference_mode():
        while len(out) < n and not (out and out[-1] in eos):
            out.append(int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax()))
    return out


def test_default_pair_greedy_outputs_equal_plain_greedy_decoding(target_model, drafter_model):
    target = Target(target_model.runner(512))
    drafter = LocalDrafter(Drafter(drafter_model.runner(512 + 30), PoolConfig(topk=10, depth=4, expand=3)))
    prompts = ["Write a haiku about autumn.", "What is 17 times 23?", "List three uses of copper."]
    eos = target_model.tokenizer.eos
    for text in prompts:
        ids = target_model.tokenizer.prompt_ids(text)
        want = plain_greedy(target_model.model, ids, eos, 48)
        for decoder in DECODERS:
            for limit in (48, 13):  # 13: the limit falls inside a round
                result = decode(target, drafter, ids, DecodeConfig(decoder, 0.0, 8, limit), eos, None)
                assert result.tokens == want[:limit], f"{decoder} differs from plain greedy decoding on {text!r}"
                decoded = target_model.tokenizer.decode(result.tokens)
                assert decoded == target_model.tokenizer.decode(want[:limit])


def test_default_pair_sampled_outputs_never_pass_the_limit(target_model, drafter_model):
    target = Target(target_model.runner(512))
    drafter = LocalDrafter(Drafter(drafter_model.runner(512 + 30), PoolConfig(topk=10, depth=4, expand=3)))
    ids = target_model.tokenizer.prompt_ids("Tell me a story about a lighthouse.")
    for decoder in DECODERS:
        for seed in range(3):
            result = decode(target, drafter, ids, DecodeConfig(decoder, 1.0, 8, 11), target_model.tokenizer.eos,
                            torch.Generator().manual_seed(seed))
            assert len(result.tokens) <= 11 and (result.hit_limit == (len(result.tokens) == 11
                                                                      and result.tokens[-1] not in
                                                                      target_model.tokenizer.eos))


def test_int8_drafter_agrees_often_with_target(target_model, drafter_model):
    """The quantized self-drafter is a useful drafter: its argmax is usually in the target's top tokens."""
    ids = target_model.tokenizer.prompt_ids("Explain how a bicycle works.")
    with torch.inference_mode():
        t = target_model.model(input_ids=torch.tensor([ids])).logits[0]
        d = drafter_model.model(input_ids=torch.tensor([ids])).logits[0]
    top1 = (t.argmax(-1) == d.argmax(-1)).float().mean().item()
    assert top1 > 0.3, f"top-1 agreement {top1:.2f}"


def run_pair(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "launch" / "pair.sh"), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_handshake_mismatch_names_both_models():
    proc = run_pair("--target", "smollm2", "--drafter", "mock", "--mock-vocab", "100", "--max-new-tokens", "4")
    assert proc.returncode != 0
    assert "HandshakeMismatch" in proc.stderr
    assert "'smollm2'" in proc.stderr and "'mock'" in proc.stderr
    assert "49152" in proc.stderr and "100" in proc.stderr


def test_missing_model_error_names_what_to_download():
    proc = run_pair("--target", "nobody/no-such-model", "--drafter", "nobody/no-such-model",
                    "--max-new-tokens", "4", timeout=120)
    assert proc.returncode != 0
    assert proc.returncode == 2, proc.stderr  # the drafter's own status: a usage error
    assert "`hf download nobody/no-such-model`" in proc.stderr  # the installed huggingface_hub's command
    assert "--allow-download" in proc.stderr


def test_default_pair_filtered_outputs_are_drawn_from_the_filtered_target_rows(target_model, drafter_model,
                                                                                 monkeypatch):
    """T = 1 with top_k 20, top_p 0.9 and min_p 0.05: each decoder's every output token is its own draw, in
    order, from a row whose law is that of a plain full forward at the token's context, filtered by the numpy
    reference. With one fresh uniform a draw (the mock law tests check the walk and the sampler on exact
    rows), the output then follows the filtered target law; a row off the law by a filter's cut or a cache or
    mask error fails here on its first use, where a goodness-of-fit test of the same decodes would need
    thousands of them to see it."""
    import pipeline.decode
    import pipeline.verify
    from pipeline.config import Filters
    from tests.pipeline.test_sampling_filters import reference, softmax

    filters, limit = Filters(top_k=20, top_p=0.9, min_p=0.05), 6
    ids = target_model.tokenizer.prompt_ids("Name one animal, any animal.")
    eos = target_model.tokenizer.eos
    laws: dict[tuple[int, ...], np.ndarray] = {}

    def law(context: tuple[int, ...]) -> np.ndarray:
        if context not in laws:
            with torch.inference_mode():
                row = target_model.model(input_ids=torch.tensor([list(context)])).logits[0, -1]
            laws[context] = reference(softmax(row.double().numpy()), filters)
        return laws[context]

    draws: list[tuple[np.ndarray, int]] = []  # (the row's law, the token drawn from it), in drawing order
    plain_draw = pipeline.verify.draw

    def recorded(logits, temperature, generator):
        tokens = plain_draw(logits, temperature, generator)
        probs = torch.softmax(pipeline.verify.tempered(logits, temperature), -1).double().numpy()
        draws.extend(zip(probs, tokens.tolist()))
        return tokens

    monkeypatch.setattr(pipeline.verify, "draw", recorded)
    monkeypatch.setattr(pipeline.decode, "draw", recorded)
    assert law(tuple(ids)).max() < 0.8, "the prompt's law is too peaked to test anything"
    target = Target(target_model.runner(512))
    drafter = LocalDrafter(Drafter(drafter_model.runner(512 + 30), PoolConfig(topk=10, depth=4, expand=3)))
    config = dict(temperature=1.0, budget=8, max_new_tokens=limit, top_k=20, top_p=0.9, min_p=0.05)
    accepted = 0
    for k, decoder in enumerate(DECODERS):
        for seed in range(4):
            draws.clear()
            result = decode(target, drafter, ids, DecodeConfig(decoder, **config), eos,
                            torch.Generator().manual_seed(1_000 * k + seed))
            out = result.tokens
            assert len(out) == limit or out[-1] in eos
            assert [t for _, t in draws[:len(out)]] == out, decoder  # a draw per token, none skipped
            for j, (probs, _) in enumerate(draws[:len(out)]):
                want = law(tuple(ids + out[:j]))
                # The runners' float32 rows against plain forwards: about 1e-5 apart (their kernels sum in
                # another order); a token cut by a filter moves its probability by 0.05 at least here.
                assert np.abs(probs - want).max() < 1e-3, (decoder, seed, j)
            accepted += sum(r.accepted for r in result.rounds)
    assert accepted > 0, "no drafted token was ever accepted: the trees' rows went untested"


@pytest.fixture(scope="module")
def random_head():
    """A random EAGLE-3 head of the default target's shape, on the target's features (layers 2, 15, 27)."""
    return load(ModelOptions(model="random:eagle3-smollm2-135m", head_target="smollm2"), "drafter")


def head_drafter(head, target: Target) -> LocalDrafter:
    from drafter_proc.head import HeadDrafter

    target.keep_features(head.model.cfg.feature_layers(30))
    return LocalDrafter(HeadDrafter(head.runner(512 + 30), PoolConfig(topk=10, depth=4, expand=3)))


def test_default_target_with_a_random_head_gives_plain_greedy_outputs(target_model, random_head):
    target = Target(target_model.runner(512))
    drafter = head_drafter(random_head, target)
    eos = target_model.tokenizer.eos
    ids = target_model.tokenizer.prompt_ids("What is 17 times 23?")
    want = plain_greedy(target_model.model, ids, eos, 24)
    for decoder in DECODERS:
        assert decode(target, drafter, ids, DecodeConfig(decoder, 0.0, 8, 24), eos, None).tokens == want, decoder


def test_default_target_with_a_random_head_draws_the_targets_first_token(target_model, random_head):
    """At T = 1 the first token of `draft`'s outputs, verified through its tree, follows the target's law
    (chi-square against the target's own row, rare outcomes pooled); whatever the head drafts, the verifier
    decides."""
    import scipy.stats

    target = Target(target_model.runner(512))
    drafter = head_drafter(random_head, target)
    eos = target_model.tokenizer.eos
    ids = target_model.tokenizer.prompt_ids("Say one word.")
    with torch.no_grad():
        first = torch.softmax(target_model.model(torch.tensor([ids])).logits[0, -1].double(), -1)
    n = 200
    counts: dict[int, int] = {}
    for seed in range(n):
        out = decode(target, drafter, ids, DecodeConfig("draft", 1.0, 8, 1), eos,
                     torch.Generator().manual_seed(seed)).tokens
        counts[out[0]] = counts.get(out[0], 0) + 1
    common = [t for t in torch.argsort(first, descending=True).tolist() if first[t] * n >= 5]
    observed = [counts.get(t, 0) for t in common] + [n - sum(counts.get(t, 0) for t in common)]
    expected = [float(first[t]) * n for t in common] + [n * (1 - float(first[common].sum()))]
    if expected[-1] < 5:  # fold a rare remainder into the last common outcome
        observed[-2:] = [observed[-2] + observed[-1]]
        expected[-2:] = [expected[-2] + expected[-1]]
    assert len(observed) >= 2 and scipy.stats.chisquare(observed, expected).pvalue > 1e-3
