"""tests/gpu/check.sh as it runs on a bare GPU image, rehearsed on the CPU: it prepares an interpreter
offline, stops at once without CUDA, and runs every section on the CPU with --rehearse."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.rules import RULES
from tests.gpu import check, pipelined
from tests.gpu.check import (EXIT_FAILED, EXIT_NO_CUDA, EXIT_OUT_OF_TIME, REHEARSAL, compute_mode_lines, exit_status,
                             goals, parse_compute_modes, share, two_process_block)
from tests.gpu.children import child_env, died, run_reporting_child

ROOT = Path(__file__).resolve().parents[2]
CHECK_SH = ROOT / "tests" / "gpu" / "check.sh"
UNREACHABLE = "http://127.0.0.1:9/simple"  # the discard port: any attempt to use the network fails


def wheels_folder() -> Path | None:
    """The folder check.sh would take pyzmq's and pytest's wheels from, as it searches them: the one a user
    names, else the checkout's packed .whl/."""
    for folder in filter(None, [os.environ.get("SPECPAIR_WHEELS"), ROOT / ".whl"]):
        if list(Path(folder).glob("pyzmq-*.whl")) and list(Path(folder).glob("pytest-*.whl")):
            return Path(folder).resolve()
    return None


def bare_python(tmp_path: Path, with_pip: bool) -> Path:
    """A venv with neither pyzmq nor pytest, whose torch and transformers are stand-ins (a GPU image's
    own packages: the prepared interpreter must still import them)."""
    venv = tmp_path / "image"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)] + ([] if with_pip else ["--without-pip"]), check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name in ("torch", "transformers"):
        (Path(site) / name).mkdir()
        (Path(site) / name / "__init__.py").write_text(f'__version__ = "0+image"  # {name} of the image\n')
    return python


def offline_env(**extra: str) -> dict[str, str]:
    """This environment without pip's settings, a chosen interpreter or this project's settings, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "SPECPAIR_"))}
    return {**env, "PIP_INDEX_URL": UNREACHABLE, "http_proxy": UNREACHABLE, "https_proxy": UNREACHABLE, **extra}


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["pip", "unpack"])
def test_preparation_installs_pyzmq_and_pytest_offline_from_the_wheels(tmp_path, installer):
    """With the interpreter's pip, or by unpacking the wheels where it has none."""
    wheels = wheels_folder()
    if wheels is None:
        pytest.skip("no wheels folder with pyzmq and pytest: name one with SPECPAIR_WHEELS")
    python = bare_python(tmp_path, with_pip=installer == "pip")
    prepared_venv = tmp_path / "build" / "prepared"  # its folder does not exist yet
    env = offline_env(PYTHON=str(python), SPECPAIR_CHECK_VENV=str(prepared_venv), SPECPAIR_WHEELS=str(wheels))
    for attempt in ("fresh", "reused"):
        # from elsewhere: pip names wheels below its working folder by relative paths
        done = subprocess.run([CHECK_SH, "--prepare"], env=env, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert ("installing pyzmq pytest from" in done.stderr) == (attempt == "fresh"), done.stderr
    prepared = done.stdout.strip()
    assert prepared == str(prepared_venv / "bin" / "python")
    probe = ("import json, pytest, torch, zmq; print(json.dumps({m.__name__: [m.__version__, m.__file__] "
             "for m in (pytest, torch, zmq)}))")
    found = json.loads(subprocess.run([prepared, "-c", probe], capture_output=True, text=True, check=True,
                                      env=offline_env()).stdout)
    assert found["zmq"][0] == "27.3.0" and found["pytest"][0] == "9.2.0"
    assert all(Path(found[m][1]).is_relative_to(prepared_venv) for m in ("zmq", "pytest"))
    assert found["torch"][0] == "0+image"  # the image's own torch, from its own site-packages
    assert Path(found["torch"][1]).is_relative_to(tmp_path / "image")
    log = Path(f"{prepared_venv}.install.log").read_text()
    said = {"pip": "Processing ", "unpack": "unpacked "}[installer]
    for wheel in ("pyzmq-27.3.0-", "pytest-9.2.0-"):
        assert any(line.startswith(said + str(wheels)) and wheel in line for line in log.splitlines()), log


def project_copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "tests" / "gpu").mkdir(parents=True)
    shutil.copy(CHECK_SH, project / "tests" / "gpu")
    return project


def python_without(tmp_path: Path, *modules: str) -> Path:
    """An interpreter that has torch and transformers, but cannot import `modules`."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\ncase "$2" in {"|".join(f"*{m}*" for m in modules)}) exit 1;; esac\n'
                      f'exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_preparation_without_wheels_stops_with_one_clear_line_also_in_the_log(tmp_path):
    project, out = project_copy(tmp_path), tmp_path / "out"
    done = subprocess.run([project / "tests" / "gpu" / "check.sh", "--prepare", "--out", out], capture_output=True,
                          text=True, env=offline_env(PYTHON=str(python_without(tmp_path, "zmq", "pytest")),
                                                     SPECPAIR_WHEELS=str(tmp_path / "none")), timeout=120)
    assert done.returncode == 2
    said = done.stderr.strip().splitlines()
    assert "cannot import pyzmq pytest, and no wheels folder holds pyzmq pytest" in said[-1]
    assert str(tmp_path / "none") in said[-1] and str(project / ".whl") in said[-1] and "--pack FOLDER" in said[-1]
    assert "shared" not in done.stderr  # no folder of this machine's is named: the user names one
    log = (out / "check.log").read_text().splitlines()
    assert log == said and log[0].endswith(f"tests/gpu/check.sh --prepare --out {out} (the whole check within 510 s)")


@pytest.mark.parametrize("where", [".whl", "$SPECPAIR_WHEELS"])
def test_only_the_missing_packages_wheels_are_asked_for_and_a_failed_install_keeps_its_log(tmp_path, where):
    """An image with pytest and without pyzmq takes a folder holding pyzmq alone, in .whl/ of a checkout
    or named by $SPECPAIR_WHEELS; the install fails on the stand-in wheel, and its log is kept in DIR."""
    project, out = project_copy(tmp_path), tmp_path / "out"
    folder = project / ".whl" if where == ".whl" else tmp_path / "wheels"
    folder.mkdir()
    (folder / "pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"not a zip")
    env = offline_env(PYTHON=str(python_without(tmp_path, "zmq")), SPECPAIR_CHECK_VENV=str(tmp_path / "venv"))
    if where != ".whl":
        env["SPECPAIR_WHEELS"] = str(folder)
    done = subprocess.run([project / "tests" / "gpu" / "check.sh", "--prepare", "--out", out], capture_output=True,
                          text=True, env=env, timeout=120)
    assert f"installing pyzmq from {folder} into" in done.stderr, done.stderr  # asked for pyzmq alone
    assert done.returncode == 2 and f"the whole install log: {out / 'install.log'}" in done.stderr
    assert (out / "install.log").read_text() == (tmp_path / "venv.install.log").read_text()
    log = (out / "check.log").read_text()
    assert f"installing pyzmq from {folder}" in log and "could not prepare" in log


def pack(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([project / "tests" / "gpu" / "check.sh", "--pack", *args], capture_output=True, text=True,
                          env=offline_env(**env), timeout=60)


@pytest.mark.parametrize("named_by", ["argument", "$SPECPAIR_WHEELS"])
def test_pack_copies_the_wheels_from_the_folder_named_into_a_git_ignored_folder(tmp_path, named_by):
    project = project_copy(tmp_path)
    wheels = tmp_path / "my wheels"
    wheels.mkdir()
    names = ["pyzmq-27.3.0-cp311-cp311-manylinux_2_28_x86_64.whl", "pyzmq-27.3.0-cp312-abi3-manylinux_2_28_x86_64.whl",
             "pytest-9.2.0-py3-none-any.whl", "iniconfig-2.3.1-py3-none-any.whl", "packaging-26.4-py3-none-any.whl",
             "pluggy-1.7.0-py3-none-any.whl", "pygments-2.21.0-py3-none-any.whl"]
    for name in names + ["tqdm-4.70.1-py3-none-any.whl"]:
        (wheels / name).write_bytes(b"wheel")
    done = pack(project, str(wheels)) if named_by == "argument" else pack(project, SPECPAIR_WHEELS=str(wheels))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (project / ".whl").iterdir()) == sorted(names)
    assert f"packed {len(names)} wheels" in done.stderr and f"from {wheels} into" in done.stderr
    assert ".whl/" in (ROOT / ".gitignore").read_text().splitlines()
    (wheels / names[2]).unlink()
    done = pack(project, str(wheels))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"check: --pack: {wheels} holds no wheel of pytest (it needs pyzmq pytest iniconfig packaging pluggy pygments)"]


def test_pack_without_a_folder_asks_for_one(tmp_path):
    done = pack(project_copy(tmp_path))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "check: --pack takes the folder that holds the wheels: tests/gpu/check.sh --pack FOLDER (or "
        "SPECPAIR_WHEELS=FOLDER)"]


@pytest.mark.slow  # two child processes import torch
def test_check_without_cuda_stops_at_once_saying_why(tmp_path):
    t0 = time.monotonic()
    done = subprocess.run([CHECK_SH, "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=offline_env(PYTHON=sys.executable))
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is usable here")
    assert done.returncode == EXIT_NO_CUDA
    assert f"torch {torch.__version__}" in done.stdout + done.stderr
    assert "needs CUDA, but" in done.stderr and "Fix:" in done.stderr
    assert time.monotonic() - t0 < 60 and not (tmp_path / "check.json").exists()
    log = (tmp_path / "check.log").read_text()  # the reason is in DIR too, the only folder that comes back
    assert log.startswith("check: ") and "needs CUDA, but" in log and f"torch {torch.__version__}" in log


@pytest.mark.slow
def test_rehearsal_runs_every_section_on_the_cpu(tmp_path):
    done = subprocess.run([CHECK_SH, "--rehearse", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200, env=offline_env(PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["status"] == dict.fromkeys(["environment", "gpu tests", "parity", "latency", "pipelined",
                                              "eagle-3 pair", "recorded rounds"], "passed")
    assert sum(r["seconds"] for r in report["sections"].values()) < report["timeout_s"]
    rounds = report["sections"]["recorded rounds"]
    assert rounds["rounds"] > 0 and not rounds["disagree"] and not rounds["without_agreement"]
    assert list(rounds["decoders"]) == pipelined.decoder_names()  # every decoder sampled at T = 1
    assert {a["decoder"] for a in rounds["agreement"]} == {d for d, rule in RULES.items() if rule.value is not None}
    assert {"draft", "root", "root-draw", "oracle"} <= set(rounds["rules"])
    assert (tmp_path / "rounds" / "rounds.shard-1-of-1.bin").stat().st_size > 0
    kinds = {json.loads(line)["kind"] for line in (tmp_path / "values.jsonl").read_text().splitlines()}
    assert {"value", "agreement"} <= kinds
    section = report["sections"]["pipelined"]
    assert list(section["decoders"]) == pipelined.decoder_names() == list(section["decoders_no_graphs"])
    assert section["outputs_differ"] == [] and section["partings"] == []
    assert all(f"{d} " in done.stdout for d in section["decoders"])  # a live line per decode
    head = report["sections"]["eagle-3 pair"]  # the head's padded buckets against its plain passes
    assert head["head_graphs"] == {"graphs": 9, "no-graphs": 0} and head["outputs_differ"] == head["problems"] == []
    assert head["features"]["graphs"]["bytes_per_token"] == 3 * 64 * 4 and head["features"]["graphs"]["commits"] > 0
    assert done.stdout.strip().splitlines()[-7:] == check.summary_lines(report)  # the output ends in the summary
    log = (tmp_path / "check.log").read_text()
    assert log.startswith("check: ") and "tests/gpu/check.sh --rehearse --out" in log.splitlines()[0]
    assert all(line in log for line in done.stdout.splitlines()[-7:]) and "== 5/7 pipelined" in log
    assert "== 6/7 eagle-3 pair" in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["check.json", "check.log", "rounds", "values.jsonl"]


def test_exit_status_reports_failures_and_time():
    assert exit_status(["passed"] * 5) == 0
    assert exit_status(["passed", "failed", "passed"]) == EXIT_FAILED
    assert exit_status(["passed", "error"]) == EXIT_FAILED
    assert exit_status(["failed", "out of time"]) == EXIT_OUT_OF_TIME
    assert exit_status(["passed", "skipped"]) == EXIT_OUT_OF_TIME
    assert exit_status(["passed", "not run"]) == 0  # a compute mode that refuses two processes says so


def test_goals_hold_root_replay_to_its_kernel_time_and_host_work_to_a_millisecond():
    report = {"sections": {
        "latency": {"status": "passed", "target llama-3.1-8b": {"1": {"graph_ms": 5.4, "kernel_ms": 5.0},
                                                                "8": {"graph_ms": 9.0, "kernel_ms": 5.0}},
                    "drafter llama-3.2-1b": {"1": {"graph_ms": 2.0, "kernel_ms": None}}, "figure": "-"},
        "pipelined": {"decoders": {"root": {"median_host_ms": 0.4}, "draft": {"median_host_ms": 1.2}}}}}
    met = {g["goal"]: g["met"] for g in goals(report)}
    assert met == {"target llama-3.1-8b: graph replay of the root pass within 10% of its kernel time": True,
                   "root: host overhead under 1 ms per round": True,
                   "draft: host overhead under 1 ms per round": False}


def test_compute_modes_are_read_and_an_exclusive_gpu_is_warned_about():
    modes = parse_compute_modes("0, NVIDIA H200, Default\n1, NVIDIA H200, Exclusive_Process\n")
    assert modes == [("0", "NVIDIA H200", "Default"), ("1", "NVIDIA H200", "Exclusive_Process")]
    lines = compute_mode_lines(modes)
    assert lines[:2] == ["compute mode: GPU 0 NVIDIA H200: Default",
                         "compute mode: GPU 1 NVIDIA H200: Exclusive_Process"]
    assert len(lines) == 3 and lines[2].startswith("WARNING: GPU 1 is in Exclusive_Process mode")
    assert compute_mode_lines(None) == ["compute mode: unknown (nvidia-smi is missing or failed)"]
    assert two_process_block(modes, "0") is None and two_process_block(modes, "1,0") is None
    assert two_process_block(modes, "1").startswith("GPU 1 is in Exclusive_Process compute mode")
    assert two_process_block(None, "1") is None and two_process_block(modes, None) is None


def test_sections_share_the_time_left_by_their_parts():
    shares = {"a": 10, "b": 30, "c": 60}
    assert share(shares, "a", ["a", "b", "c"], 200) == 20
    assert share(shares, "b", ["b", "c"], 180) == 60  # a ended 20 s early: b and c share its time
    assert share(shares, "c", ["c"], -3) == 0
    with pytest.raises(ValueError, match="`shares`"):
        check.Plan(shares={"a": 0})


def test_a_child_that_crashes_hangs_or_reports_is_told_apart(tmp_path):
    result = tmp_path / "result.json"
    crash = [sys.executable, "-c", "import os, signal; print('about to crash'); os.kill(os.getpid(), signal.SIGSEGV)"]
    assert run_reporting_child(crash, 30, result) == {
        "status": "crashed", "error": "its process was killed by SIGSEGV before reporting"}
    t0 = time.monotonic()
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert run_reporting_child(hang, 1, result)["status"] == "out of time"
    assert time.monotonic() - t0 < 30
    report = [sys.executable, "-c", f"open({str(result)!r}, 'w').write('{{\"status\": \"failed\", \"x\": 1}}')"]
    assert run_reporting_child(report, 30, result) == {"status": "failed", "x": 1}
    assert died(1) == "exited with status 1" and died(-6) == "was killed by SIGABRT"


# A section's child that keeps a first figure, says so, then hangs: the check's side of a profiler that
# never returns. It uses the section's own machinery (Section.keep, write_result) without importing torch.
HANGING_CHILD = """
import sys, time
from pathlib import Path
from tests.gpu.children import write_result
from tests.gpu.section import Budget, Section
result = Path(sys.argv[sys.argv.index("--result") + 1])
s = Section("latency", None, Budget(600, time.monotonic() + 600), result.parent,
            save=lambda figures: write_result(result, figures))
s.keep(**{"target tiny": {"1": {"graph_ms": 1.5, "kernel_ms": None}}})
print("timed the root pass", flush=True)
time.sleep(600)
"""


def passing(s):
    print(f"the {s.name} section ran")
    return {"figure": "42 tok/s"}


def test_a_section_killed_by_its_budget_leaves_the_earlier_sections_and_its_own_partial_table(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "SECTIONS", (("environment", passing), ("latency", None), ("pipelined", passing)))
    monkeypatch.setattr(check, "ISOLATED", ("latency",))
    monkeypatch.setattr(check, "REHEARSAL", replace(REHEARSAL, shares={"environment": 1, "latency": 8, "pipelined": 1}))
    monkeypatch.setattr(check, "section_command", lambda name, plan, seconds, rehearse, result: [
        sys.executable, "-c", HANGING_CHILD, "--result", str(result)])
    assert check.main(["--rehearse", "--out", str(tmp_path), "--timeout", "12"]) == EXIT_OUT_OF_TIME
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["status"] == {"environment": "passed", "latency": "out of time", "pipelined": "passed"}
    latency = report["sections"]["latency"]  # 8 parts of the 9 left of 12 s less the 5 s kept for the summary
    assert latency["target tiny"] == {"1": {"graph_ms": 1.5, "kernel_ms": None}}
    assert re.fullmatch(r"its process ran past \d+ s and was stopped", latency["error"])
    assert report["sections"]["environment"]["figure"] == "42 tok/s"
    assert "timed the root pass" in (tmp_path / "check.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["check.json", "check.log"]


# A check whose second section keeps a figure and then waits, as a section does when the outer timeout's
# SIGTERM comes; its sections are made up here, the rest is the check's own.
CUT_CHECK = """
import sys, time
from tests.gpu import check
def first(s):
    return {"figure": "first done"}
def waiting(s):
    s.keep(root_ms=1.25)
    time.sleep(600)
check.SECTIONS = (("environment", first), ("pipelined", waiting), ("recorded rounds", first))
check.ISOLATED = ()
sys.exit(check.main(sys.argv[1:]))
"""


@pytest.mark.slow  # the check's process imports torch and transformers
def test_a_check_cut_by_the_outer_timeout_keeps_every_figure_measured(tmp_path):
    proc = subprocess.Popen([sys.executable, "-P", "-c", CUT_CHECK, "--rehearse", "--out", str(tmp_path)], cwd=ROOT,
                            env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            time.sleep(0.2)
            report = json.loads((tmp_path / "check.json").read_text()) if (tmp_path / "check.json").exists() else {}
            if report.get("sections", {}).get("pipelined", {}).get("root_ms"):
                break
        assert report["status"] == {"environment": "passed", "pipelined": "running", "recorded rounds": "pending"}
        proc.terminate()  # what `timeout` sends first
        assert proc.wait(30) == EXIT_OUT_OF_TIME
    finally:
        proc.kill()
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["status"] == {"environment": "passed", "pipelined": "interrupted", "recorded rounds": "skipped"}
    assert report["sections"]["pipelined"]["root_ms"] == 1.25
    assert report["sections"]["environment"]["figure"] == "first done"


def test_every_section_runs_and_the_report_is_written_when_one_crashes(tmp_path, monkeypatch, capsys):
    """A section's process killed by a segfault, another section raising: the rest still run, check.json
    and check.log hold every section, and the output ends with one line per section."""
    def raising(s):
        s.keep(first_row=1.0)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    sections = (("environment", passing), ("gpu tests", raising), ("parity", passing), ("latency", passing),
                ("pipelined", passing))
    monkeypatch.setattr(check, "SECTIONS", sections)
    monkeypatch.setattr(check, "ISOLATED", ("parity",))
    monkeypatch.setattr(check, "section_command", lambda *a: [
        sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert check.main(["--rehearse", "--out", str(tmp_path)]) == EXIT_FAILED
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["status"] == {"environment": "passed", "gpu tests": "error", "parity": "crashed",
                                "latency": "passed", "pipelined": "passed"}
    assert report["sections"]["parity"]["error"] == "its process was killed by SIGSEGV before reporting"
    assert report["sections"]["gpu tests"]["first_row"] == 1.0  # what it kept before it raised
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-5:] == check.summary_lines(report)
    assert out[-1].split()[:2] == ["pipelined", "passed"] and out[-1].endswith("42 tok/s")
    assert "illegal memory access" in out[-4]
    log = (tmp_path / "check.log").read_text()
    assert "the latency section ran" in log and "RuntimeError: CUDA error" in log and out[-1] in log


def test_two_process_sections_are_not_run_on_a_gpu_that_admits_one_context(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "SECTIONS", (("environment", passing), ("pipelined", passing),
                                            ("recorded rounds", passing)))
    monkeypatch.setattr(check, "ISOLATED", ())
    monkeypatch.setattr(check, "compute_modes", lambda: [("0", "NVIDIA H200", "Exclusive_Process")])
    monkeypatch.setattr(check, "choose_plan", lambda args: replace(check.Plan(), gpus="0"))
    args = check.parse(["--out", str(tmp_path)])
    assert check.check(args, tmp_path, time.monotonic() + 60) == 0
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["status"] == {"environment": "passed", "pipelined": "not run", "recorded rounds": "not run"}
    assert "Exclusive_Process compute mode" in report["sections"]["pipelined"]["error"]


@pytest.mark.slow
def test_the_device_command_in_a_simulated_gpu_image(tmp_path):
    """simulate_image.sh over an image built beforehand (building it takes the package index and GBs):
    offline, in a copy of the checkout alone in its folder with the wheels packed into it, the check stops
    for want of CUDA and the rehearsal passes."""
    if not (ROOT / "build" / "sim-image" / ".built").exists():
        pytest.skip("no simulated image: tests/gpu/simulate_image.sh --build-only builds it")
    wheels = wheels_folder()
    if wheels is None:
        pytest.skip("no wheels folder with pyzmq and pytest: name one with SPECPAIR_WHEELS")
    done = subprocess.run([ROOT / "tests" / "gpu" / "simulate_image.sh", "--out", str(tmp_path), "--wheels", wheels],
                          capture_output=True, text=True, timeout=1500, env=offline_env())
    assert done.returncode == 0, done.stderr[-4000:]
    assert "check without CUDA: stopped with status 2" in done.stderr and "rehearsal: passed" in done.stderr
    report = json.loads((tmp_path / "rehearsal" / "check.json").read_text())
    assert set(report["status"].values()) == {"passed"}
    assert report["sections"]["environment"]["torch"].startswith("2.11.0")


def test_parity_runs_every_bucket_in_every_span_of_the_ladder():
    """The check's parity, run eagerly on the CPU: the passes it makes would replay every captured graph."""
    import torch

    from models.hf import CUDA_BUCKETS, aligned_slots, graph_spans
    from models.shapes import random_model
    from tests.gpu import passes

    pair = passes.runner_pair(random_model("tiny", "cpu", torch.float32), 512, 40)
    runner = pair["graph"].runner
    stepped = set()
    step = runner._step
    runner._step = lambda b, span: stepped.add((b, span)) or step(b, span)
    gaps, unreplayed = passes.parity(pair, passes.Budget(300, time.monotonic() + 300))
    assert stepped == {(b, s) for b in CUDA_BUCKETS for s in runner.spans} and len(runner.spans) == 4
    assert max(gaps.values()) == 0.0 and not unreplayed  # eager against eager, no graphs on the CPU
    with pytest.raises(ValueError, match="no context"):
        passes.span_contexts(graph_spans(aligned_slots(256)), 256)  # span 384: beyond a 73-slot pass from 255
