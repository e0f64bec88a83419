"""vLLM's sampling behaviours over the mock pair: n independent outputs seeded as vLLM seeds them, the target's
log-probabilities of the chosen tokens from the verifying pass, best_of, max_tokens=None, penalties said to be
unapplied, plain decoding without a drafter, and what a model missing here tells an API caller."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from launch.api import LLM, Pair, SamplingParams
from models.mock import MockModel
from models.present import ModelNotFound
from pipeline.config import ConfigError

TARGET = MockModel(64, 0)  # LLM("mock")'s target: ModelOptions' mock_vocab and mock_seed


@pytest.fixture(scope="module")
def llm():
    with LLM("mock", drafter="mock") as instance:
        yield instance


def target_logprobs(context: list[int]) -> np.ndarray:
    """(V,) the mock target's log-probabilities after `context`."""
    return torch.log_softmax(torch.from_numpy(TARGET.logits(TARGET.digest(context))).double(), -1).numpy()


def test_without_a_drafter_the_model_decodes_plainly_as_vllms_does():
    with LLM("mock") as plain:
        assert plain.decoder == "ar"
        (out,) = plain.generate("a b", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
        assert out.metrics.decoder == "ar" and set(out.metrics.tree_sizes) == {0}
    with LLM("mock", speculative_config={"model": "mock", "num_speculative_tokens": 3}) as speculative:
        assert (speculative.decoder, speculative.runtime["budget"]) == ("root-draw", 3)
        assert speculative.pair.drafter_options.model == "mock"


@pytest.mark.parametrize("decoder", ["ar", "draft", "root-draw", "cover", "pearl"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logprobs_are_the_targets_at_each_chosen_token(llm, decoder, temperature):
    params = SamplingParams(temperature=temperature, max_tokens=24, logprobs=3, seed=2, ignore_eos=True)
    (out,) = llm.generate({"prompt_token_ids": [5, 9, 17]}, params, decoder=decoder, budget=6, use_tqdm=False)
    (c,) = out.outputs
    assert len(c.logprobs) == len(c.token_ids) == 24 and (max(out.metrics.tree_sizes) > 0) == (decoder != "ar")
    context = [5, 9, 17]
    for token, given in zip(c.token_ids, c.logprobs):
        expected = target_logprobs(context)
        order = np.argsort(-expected, kind="stable")
        assert given[token].logprob == pytest.approx(expected[token], abs=1e-5)
        assert given[token].rank == 1 + int(np.sum(expected > expected[token] + 1e-6))
        top = sorted((lp.rank, t) for t, lp in given.items() if lp.rank <= 3)
        assert [t for _, t in top] == order[:3].tolist() and len(given) in (3, 4)
        assert given[token].decoded_token == llm.get_tokenizer().decode([token])
        context.append(token)
    assert c.cumulative_logprob == pytest.approx(sum(d[t].logprob for t, d in zip(c.token_ids, c.logprobs)))


def test_n_outputs_are_independent_decodes_seeded_as_vllm_seeds_them(llm):
    (out,) = llm.generate("x y", SamplingParams(n=3, seed=7, temperature=1.0, max_tokens=8), use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2] and len(out.decode_outputs) == 3
    assert [o.record.seed for o in out.decode_outputs] == [7, 8, 9]  # seed + i, as vLLM's children
    for c, seed in zip(out.outputs, (7, 8, 9)):
        assert c.token_ids == llm.pair.decode(out.prompt_token_ids, "root-draw", temperature=1.0, max_new_tokens=8,
                                              seed=seed).token_ids
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    fresh = SamplingParams(n=2, temperature=1.0, max_tokens=8)  # seed None: a fresh seed for every output
    (a,), (b,) = (llm.generate("x y", fresh, use_tqdm=False) for _ in range(2))
    assert len({o.record.seed for o in a.decode_outputs + b.decode_outputs}) == 4


def test_fresh_seeds_repeat_with_the_llms_seed(llm):
    params = SamplingParams(temperature=1.0, max_tokens=4)
    with LLM("mock", seed=5) as first, LLM("mock", seed=5) as second:
        seeds = [[o.decode_output.record.seed for o in x.generate(["a", "b"], params, use_tqdm=False)]
                 for x in (first, second)]
    assert seeds[0] == seeds[1] and seeds[0][0] != seeds[0][1]


def test_best_of_keeps_the_n_most_likely_decodes(llm):
    (out,) = llm.generate("x y", SamplingParams(n=2, best_of=4, seed=3, max_tokens=6), use_tqdm=False)
    assert len(out.outputs) == 2 and len(out.decode_outputs) == 2
    (every,) = llm.generate("x y", SamplingParams(n=4, seed=3, max_tokens=6, logprobs=0), use_tqdm=False)
    ranked = sorted(every.outputs, key=lambda c: -c.cumulative_logprob)[:2]
    assert [c.token_ids for c in out.outputs] == [c.token_ids for c in ranked]
    assert out.outputs[0].logprobs is None and [c.index for c in out.outputs] == [0, 1]


def test_max_tokens_none_decodes_up_to_the_context_limit():
    with LLM("mock", max_model_len=64) as small:
        params = SamplingParams(temperature=1.0, max_tokens=None, ignore_eos=True, seed=1)
        (out,) = small.generate({"prompt_token_ids": [3] * 10}, params, budget=4, use_tqdm=False)
        assert len(out.outputs[0].token_ids) == out.decode_output.record.max_new_tokens == 64 - 10 - 4 - 1
        with pytest.raises(ConfigError, match=r"^`max_tokens` None leaves no room: a prompt of 60 tokens fills "
                                              r"max_model_len 64"):
            small.generate({"prompt_token_ids": [3] * 60}, SamplingParams(max_tokens=None), budget=4)


def test_a_penalty_the_runtime_does_not_apply_is_said_in_a_line(llm, capfd):
    plain = SamplingParams(temperature=0, max_tokens=6)
    penalised = SamplingParams(temperature=0, max_tokens=6, repetition_penalty=1.3, presence_penalty=0.5)
    (a,), (b,) = (llm.generate("x y", p, use_tqdm=False) for p in (plain, penalised))
    assert a.outputs == b.outputs
    err = capfd.readouterr().err.splitlines()
    said = [line for line in err if "not applied" in line]
    assert len(said) == 1 and said[0].startswith("WARNING ")
    assert "presence_penalty=0.5, repetition_penalty=1.3 not applied" in said[0]


def test_starting_says_so_before_the_models_load(capfd):
    with LLM("mock"):
        err = capfd.readouterr().err.splitlines()
    assert err[0].startswith("INFO ") and "starting the pair: target mock, drafter mock, decoder ar" in err[0]
    assert any("the pair is ready" in line for line in err)


def test_a_missing_model_names_the_apis_argument_before_anything_starts():
    with pytest.raises(ModelNotFound, match=r"'no-such-org/no-such-model' is neither a local directory nor in the "
                                            r"local Hugging Face cache .* or pass `allow_download=True`$"):
        LLM(model="no-such-org/no-such-model")
    with pytest.raises(ModelNotFound, match=r"or pass `target_options=\{'allow_download': True\}`$"):
        Pair("no-such-org/no-such-model")


def test_a_stream_takes_one_output(llm):
    with pytest.raises(ConfigError, match=r"^`n` must be 1 in a stream \(one output streamed\), got 2"):
        next(llm.stream("x", SamplingParams(n=2)))
    outs = list(llm.stream("x y", SamplingParams(temperature=0, max_tokens=6, logprobs=1)))
    (whole,) = llm.generate("x y", SamplingParams(temperature=0, max_tokens=6, logprobs=1), use_tqdm=False)
    assert outs[-1].outputs == whole.outputs and len(outs[-1].outputs[0].logprobs) == 6
