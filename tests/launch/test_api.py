"""The Python API: a pair started, used and shut down from a script, with outputs shaped like vLLM's that
carry the command line's records."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from evaluation.output import DecodeOutput
from evaluation.record import DecodeRecord
from launch.api import Pair
from models.mock import MockModel
from models.present import ModelNotFound
from models.tokenizers import MockTokenizer
from pipeline.config import ConfigError, InputError
from tests.processes.proc_tools import ROOT


@pytest.fixture(scope="module")
def pair():
    with Pair("mock") as p:
        yield p


def test_a_decode_gives_an_output_shaped_like_vllms_with_the_command_lines_record(pair, greedy, make_record):
    out = pair.decode("Once upon a time", decoder="draft", max_new_tokens=20)
    tokenizer = MockTokenizer(64)
    assert out.prompt_token_ids == tokenizer.prompt_ids("Once upon a time")
    assert out.token_ids == greedy(MockModel(64, 0), out.prompt_token_ids, 20)
    assert (out.finish_reason, out.stop_reason, out.decoder, out.turn) == ("length", None, "draft", 0)
    assert out.text == tokenizer.decode(out.token_ids) and out.prompt == tokenizer.decode(out.prompt_token_ids)
    m = out.metrics
    assert m.seconds > 0 and m.rounds == len(m.accept_lengths) and sum(m.accept_lengths) >= 20
    assert m.tau == pytest.approx(sum(m.accept_lengths) / m.rounds) and m.acceptance and m.mean_tree_size == 8
    assert out.record.to_json().keys() == make_record("p", "ar").to_json().keys()
    assert DecodeOutput.of(DecodeRecord.from_json(json.loads(json.dumps(out.record.to_json())))) == out  # as JSON
    assert pair.models["drafter"]["model"] == "mock"


def test_a_list_of_prompts_decodes_each_with_one_bar(pair, capsys):
    prompts = ["a b c", [5, 9, 17], [{"role": "user", "content": "Why?"}]]
    outs = pair.decode(prompts, decoder="ar", max_new_tokens=6)
    assert [o.token_ids for o in outs] == [pair.decode(p, decoder="ar", max_new_tokens=6).token_ids for p in prompts]
    assert "3/3" in capsys.readouterr().err  # the bar, on stderr
    pair.decode(["x", "y"], decoder="ar", max_new_tokens=2, use_tqdm=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(InputError, match="^`prompt_id` names one prompt"):
        pair.decode(["x", "y"], prompt_id="mine")


def test_a_conversation_gives_a_record_per_turn(pair):
    outs = pair.chat(["Hello", "And then?"], "root", max_new_tokens=8)
    assert [o.turn for o in outs] == [0, 1] and len(outs[1].prompt_token_ids) > len(outs[0].prompt_token_ids)


def test_many_prompts_and_their_summary(pair):
    outs = pair.decode_many(["a b c", "d e f"], decoders=["ar", "root-draw"], max_new_tokens=12)
    assert [o.decoder for o in outs] == ["ar", "root-draw"] * 2
    assert pair.summarize([o.record for o in outs]) == pair.summarize(outs)
    summary = pair.summarize(outs)
    assert set(summary["decoders"]) == {"ar", "root-draw"} and set(summary["gains"]) == {"root-draw/ar"}


def test_bad_settings_are_refused_naming_the_keyword(pair):
    with pytest.raises(ConfigError, match="`temperature` must be a finite number >= 0"):
        pair.decode("x", temperature=-1)
    with pytest.raises(ConfigError, match="`decoder` must be one of"):
        pair.decode("x", decoder="eagle")
    with pytest.raises(ConfigError, match="^`topp` is not a decode setting; the settings are temperature, "
                                          "budget, max_new_tokens, seed, budget_max, budget_prior, top_k, "):
        pair.decode("x", topp=0.9)


@pytest.mark.slow
def test_a_target_in_its_own_process_gives_the_same_records(pair):
    settings = dict(decoder="root-draw", temperature=1.0, max_new_tokens=24, seed=3)
    here = pair.decode("Once upon a time", **settings)
    with Pair("mock", target_process=True) as remote:
        there = remote.decode("Once upon a time", **settings)
        with pytest.raises(ConfigError):
            remote.decode("x", budget=0)
        assert len(remote.decode("x", max_new_tokens=4).token_ids) == 4  # still serving after a refusal
        ids = [5, 9, 17, 3]
        assert remote.decode(ids, max_new_tokens=8).token_ids == pair.decode(ids, max_new_tokens=8).token_ids
        with pytest.raises(InputError, match="outside the vocabulary"):
            remote.decode([64], max_new_tokens=4)
    assert there.token_ids == here.token_ids and there.record.to_json().keys() == here.record.to_json().keys()


def test_a_drafter_that_cannot_load_is_reported_at_once(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # a directory that is not a checkpoint: found when it loads
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="the drafter process exited with status 2 before it was ready: "
                                           "\\[drafter\\] error: model .* is not a transformers checkpoint"):
        Pair("mock", drafter=str(tmp_path), ready_timeout=300)
    assert time.monotonic() - t0 < 60


def test_importing_the_api_changes_nothing_process_wide():
    code = ("import os, torch; env = dict(os.environ); threads = torch.get_num_threads(); "
            "import launch.api, models, models.load, pipeline.decode, target_proc.session; "
            "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items()); "
            "assert torch.get_num_threads() == threads")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_one_decoder_may_be_named_as_a_string(pair):
    outs = pair.decode_many(["a b c"], decoders="ar", max_new_tokens=4)
    assert [o.decoder for o in outs] == ["ar"]
    assert [o.decoder for o in pair.decode_many("a b", decoders="ar,draft", max_new_tokens=4)] == ["ar", "draft"]


def test_summaries_of_no_records_or_of_several_settings_say_what_to_do(pair, make_record):
    with pytest.raises(InputError, match="^`outputs` is empty"):
        pair.summarize([])
    records = [make_record(p, d, t) for t in (0.0, 1.0) for p in ("a", "b") for d in ("ar", "draft")]
    with pytest.raises(InputError, match=r"several matching settings \(temperature=0, budget=8; temperature=1, "):
        pair.summarize(records)
    hot = pair.summarize(records, temperature=1.0)
    assert hot["temperature"] == 1.0 and hot["decoders"]["ar"]["decodes"] == 2
    assert Pair.settings(records) == [(0.0, 8), (1.0, 8)]


def test_the_embedded_pair_on_the_cpu_gets_the_command_lines_reduced_pool():
    """A level shallower with a head (the default drafter) than with a standalone drafter; the paper's elsewhere."""
    from launch.api import default_pool
    from models.options import EMBEDDED, EMBEDDED_HEAD_POOL, EMBEDDED_POOL, ModelOptions
    from pipeline.config import PoolConfig

    assert default_pool(ModelOptions(model=EMBEDDED)) == EMBEDDED_HEAD_POOL
    assert default_pool(ModelOptions(model=EMBEDDED), ModelOptions(model="smollm2:eagle3")) == EMBEDDED_HEAD_POOL
    assert default_pool(ModelOptions(model=EMBEDDED), ModelOptions(model="smollm2:int8")) == EMBEDDED_POOL
    assert EMBEDDED_HEAD_POOL.depth == EMBEDDED_POOL.depth - 1
    assert default_pool(ModelOptions(model="mock")) == PoolConfig()
    assert default_pool(ModelOptions(model=EMBEDDED, device="cuda"), ModelOptions(model="smollm2:eagle3")) == PoolConfig()


def test_token_ids_and_chat_messages_are_prompts_too(pair, greedy):
    tokenizer = MockTokenizer(64)
    ids = [5, 9, 17, 3]
    record = pair.decode(ids, decoder="draft", max_new_tokens=12)
    assert record.token_ids == greedy(MockModel(64, 0), ids, 12) and record.prompt_token_ids == ids
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    record = pair.decode(messages, decoder="root-draw", max_new_tokens=12)
    context = tokenizer.message_ids(messages)
    assert record.token_ids == greedy(MockModel(64, 0), context, 12)
    assert record.prompt_token_ids == context and len(context) > len(tokenizer.prompt_ids("Why?"))


@pytest.mark.parametrize("prompt, message", [
    ([5, 64], r"^`prompt`: prompt token\[1\] = 64 is outside the vocabulary \[0, 64\)$"),
    ([{"role": "user"}], r"^`prompt` message 0 must be \{'role': system\|user\|assistant, 'content': text\}"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "last message must be the user's"),
    ([], "must be text, a non-empty list of token ids or a non-empty list of chat messages")])
def test_bad_prompts_are_refused_naming_the_problem(pair, prompt, message):
    with pytest.raises(InputError, match=message):
        pair.decode(prompt, max_new_tokens=4)


def check_stream(pair) -> None:
    """A stream's tokens and text add up to its output's; leaving one early leaves the pair answering right."""
    chunks = list(pair.stream("Once upon a time", decoder="root-draw", max_new_tokens=40))
    *rounds, last = chunks
    assert last.finished and last.token_ids == [] and rounds and not any(c.finished for c in rounds)
    assert [t for c in rounds for t in c.token_ids] == last.output.token_ids
    assert "".join(c.text for c in rounds) == last.output.text
    expected = pair.decode("again", decoder="root-draw", max_new_tokens=16)
    stream = pair.stream("A long story", decoder="root-draw", max_new_tokens=400)
    assert not next(stream).finished
    stream.close()  # the reader leaves after the first round
    assert pair.decode("again", decoder="root-draw", max_new_tokens=16).token_ids == expected.token_ids


def check_stops(pair) -> None:
    """A stop string and a stop token id end decode, decode_many and stream alike, where the greedy output
    meets them; a stream's text never shows the stop string, and adds up to the record's."""
    whole = pair.decode("Once upon a time", decoder="ar", max_new_tokens=40)
    tokenizer = MockTokenizer(64)  # its 64 ids wrap its alphabet: the text of the ids the mock target read
    prompt = tokenizer.decode(tokenizer.prompt_ids("Once upon a time"))
    assert (whole.finish_reason, whole.stop_reason, whole.prompt) == ("length", None, prompt)
    stop, token = whole.text[12:15], whole.token_ids[20]
    cut, ids = whole.text[: whole.text.index(stop)], whole.token_ids[: whole.token_ids.index(token) + 1]
    settings = dict(max_new_tokens=40, stop=stop)
    by_string = [pair.decode("Once upon a time", decoder="draft", **settings),
                 *pair.decode_many(["Once upon a time"], decoders="root-draw,pearl", **settings)]
    chunks = list(pair.stream("Once upon a time", decoder="root", **settings))
    by_string.append(chunks[-1].output)
    assert all((o.text, o.finish_reason, o.stop_reason) == (cut, "stop", stop) for o in by_string)
    assert "".join(c.text for c in chunks[:-1]) == cut
    assert all(stop not in "".join(c.text for c in chunks[: i + 1]) for i in range(len(chunks) - 1))
    chunks = list(pair.stream("Once upon a time", decoder="root-draw", max_new_tokens=40, stop_token_ids=[token]))
    out = chunks[-1].output
    assert (out.token_ids, out.finish_reason, out.stop_reason) == (ids, "stop", token)
    assert "".join(c.text for c in chunks[:-1]) == out.text == whole.text[: len(ids) - 1]


def test_a_stream_gives_each_rounds_tokens_then_the_output(pair):
    check_stream(pair)


def test_stop_strings_and_stop_token_ids_end_decodes_and_streams(pair):
    check_stops(pair)


def test_a_stream_from_a_target_process_too():
    with Pair("mock", target_process=True) as remote:
        check_stream(remote)
        check_stops(remote)


@pytest.mark.parametrize("settings, message", [
    ({"stop": ""}, r"^`stop` must be a non-empty string or a list of them, got ''"),
    ({"stop": ["a", None]}, r"^`stop` must be a non-empty string or a list of them"),
    ({"stop_token_ids": [-1]}, r"^`stop_token_ids` must be a non-negative token id or a list of them, got \[-1\]"),
    ({"stop_token_ids": [64]}, r"^`stop_token_ids` holds 64, outside the target's vocabulary \[0, 64\)")])
def test_bad_stops_are_refused_naming_the_setting(pair, settings, message):
    with pytest.raises(InputError, match=message):
        pair.decode("x", max_new_tokens=4, **settings)


def test_a_drafter_missing_here_is_named_before_anything_starts():
    with pytest.raises(ModelNotFound, match=r"^model 'nobody/no-such-model' is neither a local directory nor in the "
                                            r"local .* or pass `drafter_options=\{'allow_download': True\}`$"):
        Pair("mock", drafter="nobody/no-such-model", ready_timeout=300)


@pytest.mark.parametrize("kwargs, message", [
    (dict(target=123), "^`target` must be a model spec as text"),
    (dict(target=""), "^`target` must be a model spec"),
    (dict(target="mock", drafter=5), "^`drafter` must be a model spec"),
    (dict(target="mock", pool={"top_k": 4}), "^`pool` has 'top_k', not a pool field; the fields are topk, "),
    (dict(target="mock", pool={"topk": 4}), r"^`expand` \(10\) must not exceed `topk` \(4\)"),
    (dict(target="mock", pool=[4]), "^`pool` must be a PoolConfig or a dict of its fields, got list"),
    (dict(target="mock", pool={"depth": 0}), "^`depth`"),
    (dict(target="mock", log_level="LOUD"), "^`log_level` must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'"),
    (dict(target="mock", target_options={"threds": 2}), "^`target_options` has 'threds', not a model option"),
    (dict(target="mock", drafter_options=[1]), "^`drafter_options` must be a dict of model options, got list"),
])
def test_bad_pair_arguments_are_refused_naming_the_argument_before_anything_starts(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Pair(**kwargs)


def test_a_pool_given_as_a_dict_is_made_into_a_pool_config():
    from pipeline.config import PoolConfig

    with Pair("mock", pool={"topk": 4, "expand": 4, "depth": 3}) as pair:
        assert pair.pool == PoolConfig(topk=4, expand=4, depth=3)
        assert len(pair.decode("a b", max_new_tokens=4).token_ids) == 4


def test_summaries_of_what_is_not_an_output_name_the_argument():
    with pytest.raises(ConfigError, match="^`outputs` must hold decode outputs or records .*got a dict"):
        Pair.summarize([{}])
    with pytest.raises(ConfigError, match="^`outputs` must be a list of decode outputs or records, got str"):
        Pair.summarize("records.jsonl")
    with pytest.raises(ConfigError, match="^`outputs` must hold"):
        Pair.settings([1])


def test_no_decoders_is_refused_naming_the_argument(pair):
    for decoders in ("", " , ", []):
        with pytest.raises(ConfigError, match="^`decoders` must name at least one decoder"):
            pair.decode_many(["hi"], decoders=decoders)


def test_budget_autos_pass_timings_are_timed_once_and_the_next_pair_reuses_them(tmp_path, monkeypatch, caplog):
    """The first pair times them, saying at WARNING (what the API shows) when it starts and when it ends; the
    next pair on the machine takes them as kept, in one line."""
    monkeypatch.setenv("SPECPAIR_KERNEL_CACHE", str(tmp_path / "linear-kernels.json"))  # pass timings beside it
    said = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level("INFO", logger="budget"), Pair("mock") as p:
            p.decode("a b c", decoder="draft", budget="auto", budget_max=8, max_new_tokens=4)
        said.append([(r.levelname, r.getMessage()) for r in caplog.records if r.name == "budget"])
    timing, timed = said[0][0], said[0][1]
    assert timing[0] == timed[0] == "WARNING" and timing[1].startswith("budget auto: timing this machine's passes")
    assert timed[1].startswith("budget auto: passes timed in") and (tmp_path / "pass-timings.json").exists()
    assert len(said[1]) == 1 and said[1][0][1].startswith(f"budget auto: pass timings as kept in {tmp_path}")
