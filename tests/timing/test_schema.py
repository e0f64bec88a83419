"""One record schema: a decode run's line and a sweep's record of the same decode share their fields."""

from __future__ import annotations


def test_one_schema_for_a_decode_run_a_sweep_and_a_benchmark(tmp_path, mock_session, make_options, sweep):
    """The same decode as a decode run's --json line (programs.target_program.run_decodes, which the benchmarks read)
    and as a sweep record: the same fields with the same values, the sweep adding where it ran."""
    from evaluation.prompts import Prompt
    from pipeline.settings import DecodeConfig
    from programs.options import RunOptions
    from programs.target_program import run_decodes

    run = RunOptions(decode=DecodeConfig(max_new_tokens=24), decoders="root-draw")
    prompt = Prompt("builtin/0", "builtin", "Write a short poem about the sea at night.")
    (decoded,) = list(run_decodes(mock_session(), [prompt], run))
    store = sweep(mock_session(), make_options(tmp_path, decoders="root-draw", temperatures="0", budgets="8",
                                               warmup=0))
    (swept,) = [r for r in store.records if r.prompt_id == "builtin/0"]
    decoded, swept = decoded.to_json(), swept.to_json()
    assert swept.keys() - decoded.keys() == {"grid_budget", "position", "warmup", "shard"}
    assert decoded.keys() <= swept.keys()
    timing_fields = {"seconds", "prefill_seconds", "tokens_per_second", "phases", "finished", "load_average"}
    assert {k: v for k, v in decoded.items() if k not in timing_fields} == {
        k: swept[k] for k in decoded if k not in timing_fields}
