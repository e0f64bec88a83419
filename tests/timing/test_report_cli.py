"""Properties of python -m timing report and matched run in-process: shard directories merge into one
report, directories of other settings are refused, and the matched command is one the launcher accepts."""

from __future__ import annotations

import json
import shlex
import shutil

import pytest

from launch.pair import plan
from models.options import ModelOptions
from timing import export, matched, report, run_config
from timing.record_store import RecordStore, records_path
from timing.sweep import build_parser, gather_prompts, run_sweep, sweep_tasks



@pytest.fixture(scope="module")
def shards(tmp_path_factory, mock_session, make_options, sweep):
    """Two shard directories of one sweep over the four built-in prompts, pearl and root-draw at B = 59."""
    base = tmp_path_factory.mktemp("shards")
    for i in (1, 2):
        sweep(mock_session(), make_options(base / f"s{i}", shard=f"{i}/2", decoders="draft,pearl,root-draw",
                                           budgets="59", warmup=1))
    return base


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_report_merges_shard_directories(shards, tmp_path, capsys):
    assert report.main([str(shards / "s1"), str(shards / "s2"), "--out", str(tmp_path), "--by-category"]) == 0
    doc = last_json(capsys)
    assert [(s["temperature"], s["budget"], s["prompts"]) for s in doc["settings"]] == [(0.0, 59, 4), (1.0, 59, 4)]
    assert set(doc["settings"][0]["gains"]) == {"root-draw/draft", "pearl/draft", "root-draw/pearl"}
    text = (tmp_path / "report.md").read_text()
    assert "### T=0 B=59 [builtin]" in text and (tmp_path / "gains.png").exists()
    assert [p.rsplit("/", 1)[1] for p in doc["plots"]] == ["gains.png", "timeline.png", "speed.png", "acceptance.png",
                                                          "phases.png", "speed_by_category.png",
                                                          "acceptance_by_category.png", "phases_by_category.png"]
    assert all(f"- `{p.rsplit('/', 1)[1]}`: " in text for p in doc["plots"])


def test_one_shard_alone_reports_its_own_prompts(shards, tmp_path, capsys):
    assert report.main([str(shards / "s1"), "--out", str(tmp_path), "--no-plots"]) == 0
    doc = last_json(capsys)
    assert doc["settings"][0]["prompts"] == 2 and doc["plots"] == [] and not (tmp_path / "gains.png").exists()


def test_report_refuses_directories_of_other_settings(shards, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(shards / "s2", other)
    config = json.loads((other / "config.json").read_text())
    config["pool"]["topk"] = 9
    (other / "config.json").write_text(json.dumps(config))
    assert report.main([str(shards / "s1"), str(other), "--no-plots"]) == 2
    assert "pool.topk: 4 here, 9 now" in capsys.readouterr().err


def test_matched_command_is_accepted_by_the_launcher(shards, capsys):
    code = matched.main([str(shards / "s1"), str(shards / "s2"), "--out", "/tmp/m"])
    doc = last_json(capsys)
    assert code == 0 and doc["commands"]
    for command, (t, m) in zip(doc["commands"], doc["temperatures"].items()):
        argv = shlex.split(command)
        assert argv[:2] == ["launch/pair.sh", "sweep"]
        p = plan(argv[1:])
        shutil.rmtree(p.private_dir, ignore_errors=True)
        ns = build_parser().parse_args(p.target[p.target.index("sweep") + 1:])
        assert ns.decoders == "pearl,root-draw" and ns.budgets == "59"
        assert ns.budget_overrides == f"root-draw@59={m['cap']}" and ns.num_seeds == 2
        assert ns.pool_topk == 4 and ns.model == "mock" and ns.max_new_tokens == 24


def test_the_matched_command_draws_the_sweeps_prompts(shards):
    """A sweep whose prompts were cut to categories, spread over groups and run with every turn, with cut pools,
    a drafting window, end-of-sequence tokens ignored and greedy prompts decoded three times, gets a matched
    command that draws the same prompts, drafts the same way, ends outputs where they ended and times them as
    often."""
    config = json.loads((shards / "s1" / "config.json").read_text())
    config["sweep"].update(categories="builtin", stratify="group", turns="all", cut_pools=True, drafter_window=96,
                           ignore_eos=True, greedy_repeats=3)
    argv = shlex.split(matched.command(config, [0.0], 59, 41, 1, "/tmp/m"))
    p = plan(argv[1:])
    shutil.rmtree(p.private_dir, ignore_errors=True)
    ns = build_parser().parse_args(p.target[p.target.index("sweep") + 1:])
    assert (ns.categories, ns.stratify, ns.turns, ns.limit_prompts) == ("builtin", "group", "all",
                                                                      config["sweep"]["limit_prompts"])
    assert (ns.cut_pools, ns.cut_weigh, ns.ahead, ns.lend_cores, ns.drafter_window) == (True, False, False, False, 96)
    assert ns.ignore_eos and ns.greedy_repeats == 3


def test_report_of_an_empty_directory_says_what_is_missing(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.parametrize("program", [report, matched, export])
def test_a_file_or_nothing_where_a_run_directory_belongs_is_named_in_one_line(program, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    for given, said in (("file", "is not a directory"), ("none", "does not exist")):
        argv = [str(tmp_path / given)] + ([str(tmp_path / "out")] if program is export else [])
        assert program.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"the run directory {tmp_path / given} {said}" in err


def test_the_report_shows_how_often_auto_chose_each_budget(tmp_path, mock_session, make_options, sweep, capsys):
    options = make_options(tmp_path, decoders="ar,root-draw", temperatures="0", budgets="8,auto", warmup=0)
    sweep(mock_session(), options)
    assert report.main([str(tmp_path), "--no-plots", "--by-category"]) == 0
    text = (tmp_path / "report.md").read_text()
    auto = text[text.index("## T=0 B=auto"):]
    assert "Budget auto: share of rounds at each tree budget" in auto and "| root-draw |" in auto
    assert "Budget auto" not in text[text.index("## T=0 B=8"):text.index("## T=0 B=auto")]
    doc = last_json(capsys)
    shares = next(s for s in doc["settings"] if s["budget"] == "auto")["decoders"]["root-draw"]["budget_shares"]
    assert sum(shares.values()) == pytest.approx(1.0) and set(map(int, shares)) <= {0, 1, 2, 4, 8, 16, 32, 59}


@pytest.mark.parametrize("command", ["report", "export", "matched"])
def test_the_launchers_routes_show_the_launchers_usage(command):
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([str(root / "launch" / "pair.sh"), command, "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith(f"usage: launch/pair.sh {command} "), done.stdout


def test_the_phase_table_gives_median_ms_per_phase_by_round_kind(make_record):
    from evaluation.summary import analyse

    phases = {"draft": [0.030, 0.050, 0.0], "root": [0.010, 0.020, 0.040], "wait": [0.020, 0.030, 0.0],
              "tree": [0.040, 0.060, 0.0]}
    recs = [make_record(f"p/{i}", "root-draw", budget="auto", tree_sizes=(8, 8, 0), accepted=(1, 2, 0),
                        budgets=(8, 8, 0), phases=phases, category=c) for i, c in enumerate(("qa", "rag"))]
    s = analyse(recs, 0.0, "auto")
    rows = report._phase_table([s], {s.label: [analyse(recs, 0.0, "auto", "qa")]})
    assert rows[0] == "## Where a round's time goes"
    assert "| T=0 B=auto | all | root-draw | tree (4) | 40.00 | 15.00 | 25.00 | 1.00 | 50.00 | 1.00 | 92.00 |" in rows
    assert "| T=0 B=auto | all | root-draw | plain (2) | 0.00 | 40.00 | 0.00 | 1.00 | 0.00 | 1.00 | 42.00 |" in rows
    assert "| T=0 B=auto | qa | root-draw | tree (2) | 40.00 | 15.00 | 25.00 | 1.00 | 50.00 | 1.00 | 92.00 |" in rows


def test_a_sweep_decodes_ar_once_and_reports_it_beside_every_budget(tmp_path, mock_session, make_options, sweep,
                                                                    capsys):
    store = sweep(mock_session(), make_options(tmp_path, decoders="ar,draft", temperatures="0", budgets="8,59",
                                               warmup=0))
    ar = [r for r in store.records if r.decoder == "ar"]
    assert len(ar) == 4 and {r.sweep.grid_budget for r in ar} == {"all"}  # one per built-in prompt
    assert report.main([str(tmp_path), "--no-plots"]) == 0
    doc = last_json(capsys)
    assert [(s["budget"], s["prompts"], s["decoders"]["ar"]["decodes"]) for s in doc["settings"]] == [(8, 4, 4),
                                                                                                   (59, 4, 4)]


def test_a_gain_among_decoders_that_did_the_same_work_is_never_printed_bare(make_record):
    from evaluation.summary import analyse
    from timing.options import ReportOptions

    records = [make_record(f"p/{i}", d, budget="auto", tree_sizes=(0, 0), accepted=(0, 0), budgets=(0, 0),
                           seconds=1.0 if d == "draft" else 1.9) for i in range(6) for d in ("ar", "draft")]
    text = "\n".join(report._setting(analyse(records, 0.0, "auto"), ReportOptions(), 2))
    assert "**Caution: gains marked ⚠ measure the machine, not speculation.**" in text
    assert "- ⚠ same work: every decoder ran plain rounds (no tree verified beyond the root" in text
    row = next(line for line in text.splitlines() if line.startswith("| draft |"))  # the speed table's
    assert "| ⚠ +90.0% [" in row
    (gain,) = [line for line in text.splitlines() if line.startswith("| draft over ar |")]
    assert gain.startswith("| draft over ar | ⚠ +90.0% |") and gain.endswith("| same work |")


def test_depths_beyond_the_pools_are_marked_as_context_lookups_chains_and_root_ms_is_explained(make_record):
    from evaluation.summary import analyse
    from timing.options import ReportOptions

    records = [make_record(f"p/{i}", d, tree_sizes=(8, 8), accepted=(5, 1)) for i in range(3)  # pools of 3 levels
               for d in ("ar", "draft")]
    text = "\n".join(report._setting(analyse(records, 0.0, 8), ReportOptions(), 2))
    row = next(line for line in text.splitlines() if line.startswith("| draft |"))
    assert "| 1.00 1.00 1.00; chains 1.00 1.00 |" in row  # depths 4 and 5: a chain's, past the pool's 3
    assert "Root ms is the same one-token pass for every decoder, but not on the same cores" in text
    assert "`--solo-threads`" in text


def test_each_comparison_is_given_in_tokens_per_target_pass_with_its_interval(make_record):
    from evaluation.summary import analyse
    from timing.options import ReportOptions

    records = [make_record(f"p/{i}", d, tokens=40 + i, tree_sizes=(3,) * (10 if d == "draft" else 8))
               for i in range(6) for d in ("draft", "cover")]
    text = "\n".join(report._setting(analyse(records, 0.0, 8), ReportOptions(), 2))
    (row,) = [line for line in text.splitlines() if line.startswith("| cover over draft, per pass |")]
    assert row.startswith("| cover over draft, per pass | 5.312 | 4.250 | +25.0% | [+25.0%, +25.0%] | 6 |")
