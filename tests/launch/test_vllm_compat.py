"""The vLLM-compatible layer: a script written for vLLM runs with its import line changed, its outputs are the
pair's own decodes in vLLM's shape, and what the runtime cannot do is refused by name."""

from __future__ import annotations

import random

import pytest

from launch.api import LLM, SamplingParams
from models.load import load_tokenizer
from models.options import ModelOptions
from models.tokenizers import MockTokenizer
from pipeline.config import ConfigError

# vLLM's quickstart (docs.vllm.ai, "Offline batched inference"), the model named by the test.
VLLM_SCRIPT = """
from vllm import LLM, SamplingParams

prompts = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
llm = LLM(model=MODEL)
outputs = llm.generate(prompts, sampling_params)
for output in outputs:
    prompt = output.prompt
    generated_text = output.outputs[0].text
    print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")
"""


def run_as_for_vllm(model: str) -> dict:
    """VLLM_SCRIPT with its import line changed, run -> its globals."""
    code = VLLM_SCRIPT.replace("from vllm import", "from launch.api import")
    assert code.count("launch.api") == 1
    namespace = {"MODEL": model}
    exec(compile(code, "vllm_script", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def llm():
    with LLM("mock", drafter="mock") as instance:  # a drafter named: it decodes speculatively (root-draw)
        yield instance


def check_outputs_read_by_the_script(namespace: dict, tokenizer, capsys, decoder: str) -> None:
    """Every field the script reads, and those of vLLM's outputs beside them, against the pair's own decode."""
    outputs, llm = namespace["outputs"], namespace["llm"]
    assert len({o.decode_output.record.seed for o in outputs}) == len(outputs)  # seed None: a fresh seed each
    printed = capsys.readouterr().out.splitlines()
    assert len(outputs) == len(namespace["prompts"]) == len(printed)
    for i, (output, prompt, line) in enumerate(zip(outputs, namespace["prompts"], printed)):
        assert output.request_id == str(i) and output.finished
        assert output.prompt == prompt and output.prompt_token_ids == tokenizer.text_ids(prompt)  # raw text
        (completion,) = output.outputs
        assert line == f"Prompt: {prompt!r}, Generated text: {completion.text!r}"
        same = llm.pair.decode(output.prompt_token_ids, decoder, temperature=0.8, top_p=0.95,
                               max_new_tokens=16, seed=output.decode_output.record.seed, use_tqdm=False)
        assert completion.token_ids == same.token_ids and completion.text == same.text
        assert (completion.index, completion.cumulative_logprob, completion.logprobs) == (0, None, None)
        assert completion.finish_reason == same.finish_reason and completion.stop_reason == same.stop_reason
        assert completion.finish_reason == "stop" or len(completion.token_ids) == 16  # SamplingParams()'s
        m = output.metrics
        assert m.arrival_time < m.first_token_time <= m.finished_time
        assert m.time_to_first_token == pytest.approx(m.first_token_time - m.arrival_time) and m.decoder == decoder
        assert m.rounds == len(m.tree_sizes) and m.tokens_per_target_pass == len(completion.token_ids) / m.target_passes
        assert output.decode_output.record.prompt_token_ids == output.prompt_token_ids


def test_a_script_written_for_vllm_runs_with_its_import_line_changed(capsys):
    namespace = run_as_for_vllm("mock")
    try:
        check_outputs_read_by_the_script(namespace, MockTokenizer(64), capsys, "ar")  # no drafter: plain, as vLLM
    finally:
        namespace["llm"].close()


def test_every_prompt_form_decodes_as_the_pair_decodes_its_ids(llm):
    params = SamplingParams(temperature=0, max_tokens=8)
    tokenizer = llm.get_tokenizer()
    text, by_key, ids = llm.generate(["a b c", {"prompt": "a b c"}, {"prompt_token_ids": [5, 9, 17]}], params,
                                     use_tqdm=False)
    assert text.outputs == by_key.outputs and text.prompt == by_key.prompt == "a b c"
    assert (ids.prompt, ids.prompt_token_ids) == (None, [5, 9, 17])
    assert ids.outputs[0].token_ids == llm.pair.decode([5, 9, 17], max_new_tokens=8).token_ids
    assert tokenizer.decode(text.outputs[0].token_ids) == text.outputs[0].text
    assert tokenizer.encode("a b c") == text.prompt_token_ids
    (single,) = llm.generate("a b c", {"temperature": 0, "max_tokens": 8}, use_tqdm=False)  # a dict of fields
    assert single.outputs == text.outputs and single.request_id != text.request_id


def test_chat_takes_message_lists_through_the_template(llm):
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    first, second = llm.chat([conversation, conversation[1:]], SamplingParams(temperature=0, max_tokens=6),
                             use_tqdm=False)
    assert first.prompt_token_ids == llm.pair.session.tokenizer.message_ids(conversation)
    assert first.outputs[0].token_ids == llm.pair.decode(conversation, max_new_tokens=6).token_ids
    assert second.prompt_token_ids == llm.pair.session.tokenizer.message_ids(conversation[1:])
    (alone,) = llm.chat(conversation, SamplingParams(temperature=0, max_tokens=6))
    assert alone.outputs == first.outputs and alone.prompt == first.prompt == llm.pair.decode(conversation).prompt


def test_params_per_prompt_and_the_runtimes_settings_per_call(llm):
    hot, cold = llm.generate(["x y", "x y"], [SamplingParams(temperature=1.0, seed=4, max_tokens=5),
                                              SamplingParams(temperature=0, max_tokens=3)], decoder="ar", budget=4)
    assert len(hot.outputs[0].token_ids) == 5 and len(cold.outputs[0].token_ids) == 3
    assert hot.metrics.decoder == "ar" and hot.decode_output.record.seed == 4
    assert hot.decode_output.record.budget == 4


def test_stops_leave_their_text_out_unless_asked_to_keep_it(llm):
    prompt, greedy = "Once upon a time", SamplingParams(temperature=0, max_tokens=12)
    (free,) = llm.generate(prompt, greedy)
    ids, tokenizer = free.outputs[0].token_ids, llm.get_tokenizer()
    stop_id = ids[3]
    end = ids.index(stop_id) + 1
    for keep in (False, True):
        (out,) = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_id],
                                                     include_stop_str_in_output=keep))
        c = out.outputs[0]
        assert (c.token_ids, c.finish_reason, c.stop_reason) == (ids[:end], "stop", stop_id)
        assert c.text == tokenizer.decode(ids[: end if keep else end - 1])
    text = free.outputs[0].text
    stop = text[5:7]
    for keep in (False, True):
        (out,) = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=12, stop=stop,
                                                     include_stop_str_in_output=keep))
        c = out.outputs[0]
        at = text.index(stop)
        assert (c.finish_reason, c.stop_reason, c.text) == ("stop", stop, text[: at + (len(stop) if keep else 0)])
    (shown,) = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=12, skip_special_tokens=False))
    assert shown.outputs[0].text == tokenizer.prompt_text(ids)  # the mock's alphabet has no special tokens


def test_a_stream_yields_cumulative_outputs_ending_with_generates(llm):
    params = SamplingParams(temperature=0, max_tokens=20, stop="zzz")
    outs = list(llm.stream("Once upon a time", params))
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True] and len(outs) > 2
    for before, after in zip(outs, outs[1:]):
        b, a = before.outputs[0], after.outputs[0]
        assert a.token_ids[: len(b.token_ids)] == b.token_ids and a.text.startswith(b.text)
    assert outs[0].outputs[0].finish_reason is None and outs[0].metrics.time_to_first_token > 0
    (whole,) = llm.generate("Once upon a time", params)
    assert outs[-1].outputs == whole.outputs and outs[-2].outputs[0].token_ids == whole.outputs[0].token_ids
    assert len({o.request_id for o in outs}) == 1


def test_ignore_eos_runs_each_output_to_max_tokens_through_the_same_draws(llm):
    prompts = ["x y"] * 8
    ended, whole = (llm.generate(prompts, [SamplingParams(temperature=1.0, seed=s, max_tokens=40, ignore_eos=ignore)
                                           for s in range(8)], use_tqdm=False) for ignore in (False, True))
    assert sum(o.outputs[0].finish_reason == "stop" for o in ended) >= 2  # an end-of-sequence token was sampled
    for short, long in zip(ended, whole):
        c = long.outputs[0]
        assert (len(c.token_ids), c.finish_reason, long.decode_output.record.ignore_eos) == (40, "length", True)
        assert c.token_ids[: len(short.outputs[0].token_ids)] == short.outputs[0].token_ids


def test_the_tokenizer_is_the_targets_and_loads_without_the_model(llm):
    assert isinstance(llm.get_tokenizer(), MockTokenizer)
    assert load_tokenizer(ModelOptions("mock", mock_vocab=32)).vocab_size == 32
    assert load_tokenizer(ModelOptions("random:tiny")).vocab_size == 512


@pytest.mark.parametrize("fields, match", [
    (dict(n=0), r"^`n` must be a whole number >= 1, got 0"),
    (dict(n=3, best_of=2), r"^`best_of` must be None or a whole number >= n \(3\), got 2"),
    (dict(presence_penalty=2.5), r"^`presence_penalty` must be a number from -2 to 2, got 2.5"),
    (dict(repetition_penalty=0), r"^`repetition_penalty` must be a finite number > 0, got 0"),
    (dict(logprobs=21), r"^`logprobs` must be None or a whole number from 0 to 20 \(vLLM's max_logprobs\), got 21"),
    (dict(logprobs=-1), r"^`logprobs` must be None or a whole number from 0 to 20"),
    (dict(min_tokens=4), r"^`min_tokens` is not supported here"),
    (dict(prompt_logprobs=1), r"^`prompt_logprobs` is not supported here"),
    (dict(ignore_eos=1), r"^`ignore_eos` must be True or False"),
    (dict(max_tokens=0), r"^`max_tokens` must be None \(up to the context's limit\) or a whole number >= 1"),
    (dict(max_new_tokens=5), r"^`max_new_tokens` is not a SamplingParams field; the fields are n, presence_penalty, "),
    (dict(temperature=-1), r"^`temperature` must be a finite number >= 0"),
    (dict(top_p=0), r"^`top_p` must be a number with 0 < top_p <= 1"),
    (dict(top_k=-2), r"^`top_k` must be a non-negative integer"),
    (dict(seed=-1), r"^`seed` must be None or a whole number >= 0"),
    (dict(stop=[""]), r"^`stop` must be a non-empty string"),
    (dict(stop_token_ids=[-1]), r"^`stop_token_ids` must be a non-negative token id"),
    (dict(include_stop_str_in_output="yes"), r"^`include_stop_str_in_output` must be True or False"),
    (dict(skip_special_tokens=None), r"^`skip_special_tokens` must be True or False"),
])
def test_sampling_params_refuse_by_name(fields, match):
    with pytest.raises(ConfigError, match=match):
        SamplingParams(**fields)


def test_positional_arguments_take_vllms_order():
    params = SamplingParams(2, 0.0, 0.0, 1.0, 0.7, 0.9, 5, 0.0, 11, "x", [3], True, 40, 0, 2)
    assert (params.n, params.temperature, params.top_p, params.top_k, params.seed) == (2, 0.7, 0.9, 5, 11)
    assert (params.stop, params.stop_token_ids, params.ignore_eos, params.max_tokens, params.logprobs) == \
        (("x",), (3,), True, 40, 2)
    with pytest.raises(ConfigError, match=r"^`n` is given both by position and by keyword"):
        SamplingParams(2, n=3)
    with pytest.raises(ConfigError, match=r"^`sampling_params` take at most 16 positional arguments \(n, "):
        SamplingParams(*[0] * 17)
    with pytest.raises(ConfigError, match=r"^`drafter` and every argument after `model` are keyword arguments, "
                                          r"got 1 more positional"):
        LLM("mock", "facebook/opt-125m")


def test_the_pairs_api_refuses_sampling_params_given_as_its_decoder_by_name(llm):
    for params in (SamplingParams(temperature=0), {"temperature": 0}):
        with pytest.raises(ConfigError, match=r"^`decoder` must be one of .*, got "):
            llm.pair.decode("x", params)


def test_vllms_defaults_that_change_nothing_are_accepted():
    params = SamplingParams(best_of=None, presence_penalty=0.0, repetition_penalty=1.0, top_k=-1, stop="x",
                            stop_token_ids=[3], min_tokens=0, detokenize=True)
    assert (params.top_k, params.stop, params.stop_token_ids) == (0, ("x",), (3,))
    assert (SamplingParams().temperature, SamplingParams().max_tokens) == (1.0, 16)  # vLLM's


@pytest.mark.parametrize("call, match", [
    (lambda llm: llm.generate("x", 5), r"^`sampling_params` must be a SamplingParams, a dict of its fields or a "
                                       r"list of them, got int"),
    (lambda llm: llm.generate("x", {"max_new_tokens": 5}), r"^`max_new_tokens` is not a SamplingParams field"),
    (lambda llm: llm.generate("x", {1: 5}), r"^`sampling_params` keys must be field names, got 1"),
    (lambda llm: llm.generate(["x", "y"], [SamplingParams()] * 3), r"^`sampling_params` holds 3 parameters for 2 "),
    (lambda llm: llm.generate([]), r"^`prompts` must be a text, .* or a non-empty list of them, got list"),
    (lambda llm: llm.generate(7), r"^`prompts` must be a text, .* got int"),
    (lambda llm: llm.generate([5, 9]), r"^`prompts` holds token ids: give them as \{'prompt_token_ids': \[...\]\}"),
    (lambda llm: llm.generate(["x", ""]), r"^`prompts` prompt 1 is empty"),
    (lambda llm: llm.generate({"prompt": ""}), r"^`prompts` prompt's 'prompt' must be non-empty text"),
    (lambda llm: llm.generate({"prompt": "x", "multi_modal_data": {}}),
     r"^`prompts` prompt must hold one key, 'prompt' or 'prompt_token_ids', got \['multi_modal_data', 'prompt'\]"),
    (lambda llm: llm.generate({"prompt_token_ids": []}), r"^`prompts` prompt's 'prompt_token_ids' must be a non-"),
    (lambda llm: llm.generate({"prompt_token_ids": [3, 64]}),
     r"^`prompts` 'prompt_token_ids' holds 64, outside the tokenizer's vocabulary \[0, 64\)"),
    (lambda llm: llm.generate("x", decoder="eagle"), r"^`decoder` must be one of"),
    (lambda llm: llm.generate("x", budget=0), r"^`budget` must be"),
    (lambda llm: llm.generate("x", max_new_tokens=4), r"^`max_new_tokens` is not a decode setting here; the "
                                                       r"runtime's are decoder, budget, budget_max, "),
    (lambda llm: llm.chat("Hi"), r"^`messages` must be a list of \{'role', 'content'\} messages or a list of such"),
    (lambda llm: llm.chat([{"role": "user"}]), r"^`messages` the conversation's message 0 must be \{'role': "),
    (lambda llm: llm.chat([[{"role": "user", "content": "a"}], [{"role": "assistant", "content": "b"}]]),
     r"^`messages` conversation 1 must end with the user's message"),
    (lambda llm: llm.chat([{"role": "user", "content": "a"}], chat_template="{{ x }}"),
     r"^`chat_template` is not supported: the target's own chat template applies"),
    (lambda llm: llm.chat([{"role": "user", "content": "a"}], add_generation_prompt=False),
     r"^`add_generation_prompt` must be True"),
    (lambda llm: next(llm.stream(["a", "b"])), r"^`prompt` must be one text or one"),
])
def test_calls_refuse_by_name_before_decoding(llm, call, match):
    with pytest.raises(ConfigError, match=match):
        call(llm)


@pytest.mark.parametrize("arguments, match", [
    (dict(model=None), r"^`model` must be a model spec as `Pair` takes it \(text\), got None"),
    (dict(drafter=3), r"^`drafter` must be a model spec"),
    (dict(tensor_parallel_size=2), r"^`tensor_parallel_size` is not supported here: only 1 is accepted, got 2"),
    (dict(speculative_config={"model": "mock", "method": "ngram"}), r"^`speculative_config` 'method' must be one "
                                                                    r"of None, draft_model, eagle, eagle3, got 'ngram'"),
    (dict(speculative_config={"model": "mock", "prompt_lookup_max": 4}), r"^`speculative_config` holds "
                                                                         r"'prompt_lookup_max'; the keys taken here"),
    (dict(speculative_config={"model": "mock", "num_speculative_tokens": 0}),
     r"^`speculative_config` 'num_speculative_tokens' must be a whole number >= 1, got 0"),
    (dict(speculative_config={"num_speculative_tokens": 3}), r"^`speculative_config` must be a dict with the "),
    (dict(speculative_config={"model": "mock"}, drafter="mock"), r"^`speculative_config` and `drafter` both name "),
    (dict(allow_download="yes"), r"^`allow_download` must be True or False"),
    (dict(trust_remote_code=True), r"^`trust_remote_code` is not supported here"),
    (dict(enable_prefix_caching=True), r"^`enable_prefix_caching` is not an argument here; besides model and "
                                       r"drafter they are decoder, speculative_config, dtype, "),
    (dict(decoder="eagle"), r"^`decoder` must be one of"),
    (dict(budget="big"), r"^`budget` must be"),
    (dict(seed=-1), r"^`seed` must be None or a whole number >= 0"),
    (dict(max_model_len=0), r"^`max_model_len` must be None or a whole number >= 1"),
    (dict(enforce_eager="no"), r"^`enforce_eager` must be True or False"),
    (dict(target_options={"gpus": 2}), r"^`target_options` holds 'gpus', not a model option"),
    (dict(dtype="float8"), r"^`dtype` must be"),
])
def test_llm_refuses_what_means_nothing_here_by_name(arguments, match):
    with pytest.raises(ConfigError, match=match):
        LLM(**{"model": "mock", **arguments})


def test_llm_maps_vllms_arguments_and_ignores_only_the_harmless(llm):
    with LLM(model="mock", max_model_len=512, seed=5, dtype="float32", gpu_memory_utilization=0.5,
             tensor_parallel_size=1, decoder="draft", budget=4) as mapped:
        assert mapped.pair.target_options.max_context == 512 and mapped.pair.drafter_options.dtype == "float32"
        (out,) = mapped.generate("x y", SamplingParams(temperature=1.0, max_tokens=4))
        record = out.decode_output.record
        assert (record.decoder, record.budget) == ("draft", 4)
        assert record.seed == random.Random(5).randrange(2 ** 32)  # the first fresh seed LLM(seed=5) draws


@pytest.mark.slow
def test_a_target_in_its_own_process_reads_raw_text_with_a_tokenizer_loaded_here(llm):
    params = SamplingParams(temperature=0, max_tokens=8, logprobs=2)  # the log-probabilities cross the wire too
    with LLM("mock", drafter="mock", target_process=True) as remote:
        assert remote.pair.session is None and isinstance(remote.get_tokenizer(), MockTokenizer)
        (there,) = remote.generate("a b c", params)
    (here,) = llm.generate("a b c", params)
    assert there.outputs == here.outputs and there.prompt_token_ids == here.prompt_token_ids


@pytest.mark.slow
def test_a_script_written_for_vllm_runs_on_the_embedded_pair(capsys):
    namespace = run_as_for_vllm("smollm2")
    llm = namespace["llm"]
    try:
        tokenizer = llm.get_tokenizer()
        check_outputs_read_by_the_script(namespace, llm.pair.session.tokenizer, capsys, "root-draw")
        raw = namespace["outputs"][0].prompt_token_ids
        assert raw == tokenizer("Hello, my name is")["input_ids"]  # raw text: no chat template
        messages = [{"role": "user", "content": "Hello, my name is"}]
        (chat,) = llm.chat(messages, SamplingParams(temperature=0, max_tokens=8))
        assert chat.prompt_token_ids == llm.pair.session.tokenizer.message_ids(messages)
        assert chat.prompt_token_ids != raw and "<|im_start|>" in chat.prompt
    finally:
        llm.close()
