"""Properties of the sweep loop on an in-process mock pair: one record per decode with everything a report
needs, resumable after a kill at any point, shards that merge into the whole sweep, and refusal to mix
settings in one directory."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import nullcontext

import pytest

from models.options import ModelOptions
from pipeline.config import CapacityError, PoolConfig
from timing import run_config
from timing.record_store import RecordStore, load_records, read_records, record_key, records_path
from timing.sweep import gather_prompts, main, run_shard, run_sweep, summary, sweep_tasks
from tests.timing.killed import DiesAfter, Killed


def config(options, pool, prompts) -> dict:
    mock = ModelOptions(model="mock")
    return run_config.describe(mock, mock, pool, options, prompts)


def test_every_decode_is_recorded_once_with_its_rounds(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path)
    store = sweep(mock_session(), options)
    assert len(store.records) == 4 * 16 + 2 * 16  # prompts x combinations + warm-ups
    assert len({record_key(r) for r in store.records}) == len(store.records)
    timed = Counter((r.prompt_id) for r in store.records if not r.warmup)
    assert len(timed) == 4 and set(timed.values()) == {16} and all(p.startswith("builtin/") for p in timed)
    for r in store.records:
        n = r.rounds
        assert 0 < r.new_tokens == len(r.token_ids) <= 24 and r.seconds > r.prefill_seconds > 0
        assert len(r.accepted) == len(r.tree_sizes) == len(r.accept_lengths) == len(r.tried) == n
        assert set(r.phases) >= {"draft", "root", "wait", "select", "tree", "commit"}
        assert all(len(v) == n for v in r.phases.values())
        assert (r.stop == "limit") == (0 not in r.token_ids)  # mock end-of-sequence is token 0
        assert r.new_tokens + r.overshoot == sum(r.accept_lengths) or r.stop == "eos"
        assert r.sweep.grid_budget == r.budget and r.turn == 0
        if r.decoder == "root-draw":  # X1 plus its pool descendants
            assert all(min(r.budget, a) == t for a, t in zip(r.available, r.tree_sizes))
    # the order within each prompt is its rotation: the first decode of the prompt at position i is combo i
    first = {}
    for r in store.records:
        if not r.warmup:
            first.setdefault(r.sweep.position, r)
    assert len({(r.decoder, r.temperature, r.budget) for r in first.values()}) == 4


def test_a_sweep_killed_mid_decode_resumes_to_one_record_per_decode(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path)
    whole = sweep(mock_session(), make_options(tmp_path / "whole"))
    path = records_path(tmp_path, 1, 1)
    for kill_after in (5, 40, 7):  # killed during warm-up, during timed decodes, again after a resume
        with pytest.raises(Killed):
            sweep(DiesAfter(mock_session(), kill_after), options)
        with open(path, "ab") as f:
            f.write(b'{"prompt_id": "builtin/1", "dec')  # the kill tore the line being written
    store = sweep(mock_session(), options)
    keys = [record_key(r) for r in read_records(path)]
    assert len(keys) == len(set(keys)) == len(whole.records)
    assert set(keys) == {record_key(r) for r in whole.records}
    starts = run_config.read_config(tmp_path)["starts"]
    assert len(starts) == 4
    assert summary(options, sweep_tasks(options, gather_prompts(options)), store.records)["complete"]


def test_warmups_run_again_after_a_restart_but_are_recorded_once(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path, decoders="draft,root", temperatures="0", budgets="8")
    with pytest.raises(Killed):
        sweep(DiesAfter(mock_session(), 6), options)  # 4 warm-ups and 2 timed decodes
    counting = DiesAfter(mock_session(), 10**6)
    sweep(counting, options)
    assert 10**6 - counting.n == 4 + (8 - 2)  # the warm-ups again, then the 6 timed decodes left
    recs = read_records(records_path(tmp_path, 1, 1))
    assert sum(r.warmup for r in recs) == 4 and len(recs) == 4 + 8


def test_shards_split_prompts_and_merge_into_the_whole_sweep(tmp_path, mock_session, make_options, sweep):
    whole = sweep(mock_session(), make_options(tmp_path / "whole", warmup=0))
    parts = []
    for i in (1, 2, 3):
        store = sweep(mock_session(), make_options(tmp_path / f"s{i}", shard=f"{i}/3", warmup=0))
        parts.append({r.prompt_id for r in store.records})
        assert {r.sweep.shard for r in store.records} == {f"{i}/3"}
    assert not (parts[0] & parts[1]) and not (parts[1] & parts[2]) and sum(map(len, parts)) == 4
    merged = load_records([tmp_path / f"s{i}" for i in (1, 2, 3)])
    assert {record_key(r) for r in merged} == {record_key(r) for r in whole.records}
    # mock decodes are deterministic: a decode's tokens do not depend on the shard that ran it
    tokens = {record_key(r): r.token_ids for r in whole.records}
    assert all(r.token_ids == tokens[record_key(r)] for r in merged)


def test_resuming_with_other_settings_is_refused_naming_them(tmp_path, mock_session, make_options, sweep):
    sweep(mock_session(), make_options(tmp_path, decoders="draft", temperatures="0", budgets="8"))
    with pytest.raises(run_config.ConfigMismatch, match=r"sweep\.budgets: '8' here, '8,59' now"):
        sweep(mock_session(), make_options(tmp_path, decoders="draft", temperatures="0", budgets="8,59"))
    with pytest.raises(run_config.ConfigMismatch, match=r"sweep\.n_shards"):
        sweep(mock_session(), make_options(tmp_path, decoders="draft", temperatures="0", budgets="8", shard="1/2"))
    sweep(mock_session(), make_options(tmp_path, decoders="draft", temperatures="0", budgets="8"))  # resumes


def test_a_config_written_before_budget_prior_existed_resumes_with_its_default(tmp_path, mock_session, make_options,
                                                                               sweep):
    settings = dict(decoders="draft", temperatures="0", budgets="auto", warmup=0, limit_prompts=1)
    sweep(mock_session(), make_options(tmp_path, **settings))
    path = tmp_path / run_config.CONFIG
    config = json.loads(path.read_text())
    del config["sweep"]["budget_prior"]
    path.write_text(json.dumps(config))
    sweep(mock_session(), make_options(tmp_path, **settings))  # the session prior then: the same settings
    with pytest.raises(run_config.ConfigMismatch, match=r"sweep\.budget_prior: 'session' here, 'decode' now"):
        sweep(mock_session(), make_options(tmp_path, budget_prior="decode", **settings))


def test_a_sweep_with_ignore_eos_records_it_and_resumes_only_with_it(tmp_path, mock_session, make_options, sweep):
    settings = dict(decoders="ar,draft", temperatures="0,1", budgets="8", warmup=0, limit_prompts=2, max_new_tokens=24)
    path = tmp_path / run_config.CONFIG
    sweep(mock_session(), make_options(tmp_path / "plain", **settings))
    config = json.loads((tmp_path / "plain" / run_config.CONFIG).read_text())
    del config["sweep"]["ignore_eos"]  # a config written before the setting existed: resumed with its default
    (tmp_path / "plain" / run_config.CONFIG).write_text(json.dumps(config))
    sweep(mock_session(), make_options(tmp_path / "plain", **settings))
    store = sweep(mock_session(), make_options(tmp_path, ignore_eos=True, **settings))
    assert store.records and all(r.ignore_eos and r.new_tokens == 24 for r in store.records)
    assert json.loads(path.read_text())["sweep"]["ignore_eos"] is True
    with pytest.raises(run_config.ConfigMismatch, match=r"sweep\.ignore_eos: True here, False now"):
        sweep(mock_session(), make_options(tmp_path, **settings))


def test_greedy_repeats_decode_each_prompt_again_to_the_same_output_and_reports_sum_them(
        tmp_path, mock_session, make_options, sweep):
    from evaluation.summary import analyse

    settings = dict(decoders="ar,draft", temperatures="0,1", budgets="8", warmup=0, limit_prompts=2, max_new_tokens=12)
    config = tmp_path / run_config.CONFIG
    store = sweep(mock_session(), make_options(tmp_path, greedy_repeats=3, **settings))
    greedy = [r for r in store.records if r.temperature == 0]
    assert len(greedy) == 2 * 2 * 3 and len(store.records) - len(greedy) == 2 * 2  # T = 1: one seed
    outputs = {}
    for r in greedy:
        outputs.setdefault((r.prompt_id, r.decoder), set()).add(tuple(r.token_ids))
    assert all(len(o) == 1 for o in outputs.values()) and {r.seed for r in greedy} == {0, 1, 2}
    setting = analyse(store.records, 0.0, 8)
    assert setting.seeds == [0, 1, 2] and len(setting.prompt_ids) == 2
    draft = sum(r.seconds for r in greedy if r.decoder == "draft")
    assert setting.decoders["draft"].seconds.sum() == pytest.approx(draft)

    with pytest.raises(run_config.ConfigMismatch, match=r"sweep\.greedy_repeats: 3 here, 1 now"):
        sweep(mock_session(), make_options(tmp_path, **settings))
    sweep(mock_session(), make_options(tmp_path / "once", **settings))
    old = json.loads((tmp_path / "once" / run_config.CONFIG).read_text())
    del old["sweep"]["greedy_repeats"]  # a config written before the setting existed: resumed with its default
    (tmp_path / "once" / run_config.CONFIG).write_text(json.dumps(old))
    sweep(mock_session(), make_options(tmp_path / "once", **settings))


def test_a_sweep_refused_before_its_first_record_takes_corrected_settings(tmp_path, mock_session, make_options, sweep):
    with pytest.raises(CapacityError):
        sweep(mock_session(), make_options(tmp_path, max_new_tokens=2000))
    store = sweep(mock_session(), make_options(tmp_path, max_new_tokens=24))  # no need to delete the folder
    assert store.records and run_config.read_config(tmp_path)["sweep"]["max_new_tokens"] == 24


def test_prompts_edited_under_the_same_source_name_are_refused(tmp_path, mock_session, make_options, sweep):
    source = tmp_path / "prompts.txt"
    source.write_text("first prompt\nsecond prompt\n")
    options = make_options(tmp_path / "out", prompts=(str(source),), decoders="draft", temperatures="0",
                           budgets="8", warmup=0)
    sweep(mock_session(), options)
    source.write_text("first prompt\nanother second prompt\n")
    with pytest.raises(run_config.ConfigMismatch, match=r"prompt_set\.digest"):
        sweep(mock_session(), options)


def test_the_sweep_process_refuses_another_model_before_loading_it(tmp_path, mock_session, make_options, sweep,
                                                                   capsys):
    out = str(tmp_path)
    sweep(mock_session(), make_options(tmp_path, decoders="draft", temperatures="0", budgets="8", warmup=0))
    args = ["--model", "mock", "--endpoint", f"ipc://{tmp_path}/x.sock", "--out", out, "--decoders", "draft",
            "--temperatures", "0", "--budgets", "8", "--warmup", "0", "--max-new-tokens", "24",
            "--ready-timeout", "5"]
    assert main([*args, "--mock-vocab", "32"]) == 2  # no drafter listens: a refusal comes before connecting
    err = capsys.readouterr().err
    assert "models.target.mock_vocab: 64 here, 32 now" in err and "use another --out" in err
    assert "[timing] error:" in err


def test_a_prompt_that_cannot_fit_the_cache_stops_the_sweep_before_any_decode(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path, max_new_tokens=2000)
    with pytest.raises(CapacityError, match=r"needs \d+ KV slots; the target's cache holds 1024 "
                                            r"\(raise `max_context`\)"):
        sweep(mock_session(), options)
    assert read_records(records_path(tmp_path, 1, 1)) == []


def test_summary_is_one_json_document(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path, decoders="draft,root-draw", temperatures="0", budgets="8")
    store = sweep(mock_session(), options)
    doc = json.loads(json.dumps(summary(options, sweep_tasks(options, gather_prompts(options)), store.records)))
    assert doc["complete"] and doc["records"] == 4 * 2 + 2 * 2 and set(doc["speeds"]["T=0 B=8"]) == {"draft", "root-draw"}


def spec_bench_file(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Make it rhyme."]},
        {"question_id": 82, "category": "roleplay", "turns": ["Be a pirate.", "Now a sailor."]},
        {"question_id": 301, "category": "qa", "turns": ["Who wrote Hamlet?"]}]) + "\n")
    return f"spec-bench:{path}"


def test_all_turns_are_recorded_and_a_conversation_cut_short_resumes_at_its_missing_turn(
        tmp_path, mock_session, make_options, sweep):
    source = spec_bench_file(tmp_path)
    options = make_options(tmp_path / "out", prompts=(source,), turns="all", decoders="draft", temperatures="0",
                           budgets="8", warmup=0)
    whole = sweep(mock_session(), make_options(tmp_path / "whole", prompts=(source,), turns="all",
                                               decoders="draft", temperatures="0", budgets="8", warmup=0))
    assert Counter(r.prompt_id for r in whole.records) == {"spec-bench/81": 2, "spec-bench/82": 2,
                                                              "spec-bench/301": 1}
    with pytest.raises(Killed):
        sweep(DiesAfter(mock_session(), 1), options)  # the first question's first turn only
    recs = read_records(records_path(tmp_path / "out", 1, 1))
    assert [(r.prompt_id, r.turn) for r in recs] in ([("spec-bench/81", 0)], [("spec-bench/82", 0)],
                                                           [("spec-bench/301", 0)])
    counting = DiesAfter(mock_session(), 10**6)
    store = sweep(counting, options)
    assert 10**6 - counting.n == 4  # the 5 turns less the one recorded
    by_key = {record_key(r): r.token_ids for r in store.records}
    assert by_key == {record_key(r): r.token_ids for r in whole.records}


def test_first_turns_only_by_default(tmp_path, mock_session, make_options, sweep, caplog):
    options = make_options(tmp_path, prompts=(spec_bench_file(tmp_path),), decoders="draft", temperatures="0",
                           budgets="8", warmup=0)
    store = sweep(mock_session(), options)
    assert {r.turn for r in store.records} == {0} and len(store.records) == 3
    assert "2 later turns of 2 multi-turn questions are skipped" in caplog.text


def test_starts_that_chose_other_cpu_kernels_share_a_directory_and_other_weights_do_not(tmp_path):
    """Kernels are timed at load, so two starts on the same weights may choose differently: each start keeps
    its own choice, and only the weights (revision, dtype, device) must match."""
    target = {"model": "smollm2", "revision": "files:1", "dtype": "float32", "device": "cpu"}
    drafter = {**target, "model": "smollm2:int8"}
    (tmp_path / run_config.CONFIG).write_text(json.dumps({"starts": [{"id": "start-0"}, {"id": "start-1"}]}))
    for i, kernels in enumerate(({"576x576": ["transposed"] * 3}, {"576x576": ["stock", "packed", "packed"]})):
        run_config.note_identity(tmp_path, f"start-{i}", {"target": {**target, "linear_kernels": kernels},
                                                          "drafter": drafter})
    config = run_config.read_config(tmp_path)
    assert config["identity"] == {"target": target, "drafter": drafter}
    assert [s["models_at_load"]["target"]["linear_kernels"] for s in config["starts"]] == [
        {"576x576": ["transposed"] * 3}, {"576x576": ["stock", "packed", "packed"]}]
    with pytest.raises(run_config.ConfigMismatch, match=r"target\.revision"):
        run_config.note_identity(tmp_path, "start-1", {"target": {**target, "revision": "files:2"},
                                                       "drafter": drafter})
