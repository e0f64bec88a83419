"""`launch/pair.sh` as a user runs it: usage errors name the option, --json prints one object per decode,
tcp endpoints work, and however the pair ends (a dead drafter, Ctrl-C, a killed launcher) no process is
left behind."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from evaluation.provenance import vector_width
from evaluation.record import DecodeRecord
from models.kernel_cache import processor
from models.mock import MockModel
from models.options import ModelOptions
from models.tokenizers import MockTokenizer
from protocol.keys import own_keys
from protocol.transport import loopback_tcp_endpoint

from tests.processes.proc_tools import LONG_RUN as PROCESS_LONG_RUN
from tests.processes.proc_tools import PAIR_SH, START_S, Running, kill_leftovers, role_pids, wait_gone

LONG_RUN = ["--target", "mock", *PROCESS_LONG_RUN]


def pair(*args: str, timeout: float = 2 * START_S, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([PAIR_SH, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd)


@pytest.fixture
def launched(tmp_path):
    """Start launch/pair.sh in its own process group; whatever it left running is killed afterwards."""
    runs: list[Running] = []
    pids: list[int] = []

    def start(*args: str) -> Running:
        runs.append(Running([PAIR_SH, *args], tmp_path, f"pair{len(runs)}", start_new_session=True))
        return runs[-1]

    start.pids = pids  # tests add the children they found, for cleanup
    yield start
    for run in runs:
        run.kill()
    kill_leftovers(pids)


USAGE_ERRORS = [
    (["--budget", "0"], r"--budget must be a positive integer or auto, got 0"),
    (["--budget", "x"], r"--budget must be a positive integer or auto, got .x."),
    (["--pool-expand", "20"], r"--pool-expand \(20\) must not exceed --pool-topk \(10\)"),
    (["--pool-topk", "0"], r"--pool-topk must be a positive integer, got 0"),
    (["--temperature", "-1"], r"--temperature must be a finite number >= 0, got -1.0"),
    (["--temperature", "nan"], r"--temperature must be a finite number >= 0, got nan"),
    (["--decoders", "draft,fast"], r"--decoders must list distinct names from ar,draft,.*, got 'draft,fast'"),
    (["--decoders", ","], r"--decoders must list distinct names from"),
    (["--gpus", "x"], r"--gpus must be one or two GPU indices such as 0,1 or 0, got 'x'"),
    (["--gpus", "0,1,2"], r"--gpus must be one or two GPU indices"),
    (["--endpoint", "udp://127.0.0.1:5555"], r"--endpoint 'udp://127.0.0.1:5555' must be ipc://PATH, tcp://HOST:PORT"),
    (["--endpoint", "ipc:///no/such/dir/d.sock"], r"--endpoint 'ipc:///no/such/dir/d.sock': the socket's directory"),
    (["--endpoint", "tcp://127.0.0.1"], r"--endpoint 'tcp://127.0.0.1' must look like tcp://HOST:PORT"),
    (["--mock-vocab", "1"], r"--mock-vocab must be an integer >= 2, got 1"),
    (["--max-context", "8"], r"--max-context must be an integer >= 16, got 8"),
    (["--num-seeds", "0"], r"--num-seeds must be a positive integer, got 0"),
    (["--drafter-timeout", "0"], r"--drafter-timeout must be a finite number of seconds > 0, got 0.0"),
    (["--drafter-timeout", "inf"], r"--drafter-timeout must be a finite number of seconds > 0, got inf"),
    (["--ready-timeout", "nan"], r"--ready-timeout must be a finite number of seconds > 0, got nan"),
    (["--max-context", "1e12"], r"argument --max-context: invalid int value: '1e12'"),
    (["--limit-prompts", "-1"], r"--limit-prompts must be a non-negative integer, got -1"),
    (["--log-level", "LOUD"], r"argument --log-level: invalid choice: 'LOUD'"),
]


@pytest.mark.parametrize("args, message", USAGE_ERRORS, ids=[" ".join(args) for args, _ in USAGE_ERRORS])
def test_bad_option_is_a_usage_error_naming_it(args, message):
    done = pair("--target", "mock", *args, timeout=START_S)
    assert done.returncode == 2, done.stderr
    assert re.search(r"launch/pair.sh: error: " + message, done.stderr), done.stderr
    assert done.stderr.count("\n") == 1 and "usage" not in done.stderr  # one line; the usage is --help's
    assert done.stdout == ""


def test_drafter_without_target_is_a_usage_error():
    done = pair("--drafter", "mock", timeout=START_S)
    assert done.returncode == 2
    assert "error: --target and --drafter go together" in done.stderr


@pytest.mark.slow
def test_json_run_prints_provenance_then_one_greedy_record_per_decode_then_a_summary(greedy, make_record):
    prompts, decoders, limit = ["Once upon a time", "def fib(n):"], ["ar", "draft", "root"], 40
    done = pair("--target", "mock", "--json", "--decoders", ",".join(decoders), "--num-seeds", "2",
                "--max-new-tokens", str(limit), "--prompt", prompts[0], "--prompt", prompts[1])
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]  # any log line here would not parse
    header, records, summary = lines[0], lines[1:-1], lines[-1]
    assert header["kind"] == "run" and summary["kind"] == "summary" and len(records) == 12
    assert header["models"]["drafter"] == {"model": "mock", "revision": "mock vocab=64 seed=0 noise=1",
                                           "dtype": "float32", "device": "cpu"}
    assert header["environment"]["git"]["commit"] and header["settings"]["max_new_tokens"] == limit
    # One schema: a decode run's record has exactly the fields of every decode record (evaluation.record).
    assert all(r.keys() == make_record("p", "ar").to_json().keys() for r in records)
    records = [DecodeRecord.from_json(r) for r in records]
    assert sorted((r.prompt_id, r.seed, r.decoder) for r in records) == sorted(
        itertools.product(["prompt/0", "prompt/1"], range(2), decoders))
    assert "[target] drafter 'mock' ready" in done.stderr and "[drafter] handshake" in done.stderr
    assert done.stderr.count(" tok/s") == 12  # a live line per decode, even with --json
    options = ModelOptions(model="mock")
    model, tokenizer = MockModel(options.mock_vocab, options.mock_seed), MockTokenizer(options.mock_vocab)
    for r in records:
        assert r.temperature == 0.0 and r.budget == 8
        assert r.rounds >= 1 and r.target_passes >= r.rounds and r.seconds > 0
        assert r.tokens_per_second == pytest.approx(r.new_tokens / r.seconds)
        assert r.text == tokenizer.decode(r.token_ids)
        # At T = 0 every decoder emits the target's own argmax stream, exactly to the limit or the
        # end-of-sequence token.
        want = greedy(model, tokenizer.prompt_ids(prompts[int(r.prompt_id[-1])]), limit)
        assert r.token_ids == want and r.new_tokens == len(want)
    assert set(summary["decoders"]) == set(decoders) and set(summary["gains"]) >= {"draft/ar", "root/ar"}
    assert summary["decoders"]["ar"]["tau"] == 1.0 and summary["decoders"]["draft"]["tau"] > 1.0


@pytest.mark.slow
@pytest.mark.parametrize("temperature", ["0", "1"])
def test_drafting_ahead_between_processes_changes_no_output_and_records_its_hits(temperature):
    runs = {}
    for ahead in ([], ["--ahead"]):
        done = pair("--target", "mock", "--json", "--decoders", "draft,root-draw", "--max-new-tokens", "48",
                    "--temperature", temperature, "--prompt", "Once upon a time", *ahead)
        assert done.returncode == 0, done.stderr
        runs[bool(ahead)] = decode_records(done.stdout)
    for off, on in zip(runs[False], runs[True]):
        assert on.token_ids == off.token_ids and on.ahead and not off.ahead
        assert set(off.ahead_hits) == {-1}
        assert set(on.ahead_hits) <= {-1, 0, 1} and 0 in on.ahead_hits
        assert temperature == "1" or 1 in on.ahead_hits  # greedy mocks agree often enough to hit
        assert on.ahead_hits[0] == -1  # round 0's pool grows from the prompt
        assert all(s >= 0 for s in on.ahead_seconds)
        assert all(s == 0 for s, hit in zip(on.ahead_seconds, on.ahead_hits) if hit != 1)


def test_a_drafting_window_between_processes_changes_no_output_and_is_recorded():
    runs = {}
    for window in ("0", "6"):
        done = pair("--target", "mock", "--json", "--decoders", "root-draw", "--max-new-tokens", "24",
                    "--drafter-window", window, "--prompt", "Once upon a time, in a land far away, there lived")
        assert done.returncode == 0, done.stderr
        (runs[window],) = decode_records(done.stdout)
    assert runs["6"].token_ids == runs["0"].token_ids
    assert (runs["0"].drafter_window, runs["6"].drafter_window) == (0, 6)
    done = pair("--target", "mock", "--drafter-window", "-3", "--prompt", "x")
    assert done.returncode == 2 and "drafter-window" in done.stderr and "Traceback" not in done.stderr


def test_a_run_with_context_lookup_says_so_and_its_records_give_it():
    done = pair("--target", "mock", "--decoders", "ar,draft", "--lookup", "4", "--max-new-tokens", "24",
                "--prompt", "one two one two one two", "--prompt", "red blue red blue")
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("pool topk=") and "+ context lookup 4;" in line for line in done.stdout.splitlines())
    done = pair("--target", "mock", "--decoders", "ar,draft", "--lookup", "4", "--max-new-tokens", "24", "--json",
                "--prompt", "one two one two one two")
    records = {r.decoder: r for r in decode_records(done.stdout)}
    assert (records["ar"].lookup, records["draft"].lookup) == (0, 4)
    assert len(records["draft"].copied) == records["draft"].rounds


def test_table_shows_the_fields_metrics():
    done = pair("--target", "mock", "--decoders", "ar,root-draw", "--prompt", "Once upon a time", "--prompt",
                "def fib(n):", "--max-new-tokens", "30")
    assert done.returncode == 0, done.stderr
    head = next(line for line in done.stdout.splitlines() if line.startswith("decoder"))
    assert "vs ar [95% interval]" in head and "tau" in head and "tok/pass" in head and "acceptance by depth" in head
    lines = done.stdout.splitlines()
    machine = next(i for i, line in enumerate(lines) if line.startswith("machine: "))
    vectors = f" ({vector_width()})" if vector_width() else ""  # the CPU's vector width beside its model
    assert machine < lines.index(head) and f"{processor()}{vectors}, {os.cpu_count()} CPUs" in lines[machine]
    assert lines[machine].endswith("target mock, drafter mock")  # which pair gave the table
    row = next(line for line in done.stdout.splitlines() if line.startswith("root-draw"))
    assert re.search(r"[+-]\d+\.\d% \(no interval\)", row), row  # two prompts: about their range
    assert "no interval: a paired-bootstrap interval needs at least 5 prompts" in done.stdout
    texts = ("Once upon a time", "def fib(n):", "Hello", "A river", "Why?")
    prompts = [arg for text in texts for arg in ("--prompt", text)]
    done = pair("--target", "mock", "--decoders", "ar,root-draw", *prompts, "--max-new-tokens", "30")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("root-draw"))
    assert re.search(r"[+-]\d+\.\d% \[[+-]\d+\.\d, [+-]\d+\.\d\]", row), row


def decode_records(stdout: str) -> list[DecodeRecord]:
    """The decode records of a --json run (the lines between its provenance and its summary)."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines[0]["kind"] == "run" and lines[-1]["kind"] == "summary"
    return [DecodeRecord.from_json(r) for r in lines if r["kind"] == "decode"]


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ["tcp", "explicit"])
def test_tcp_endpoints_work(endpoint):
    address = loopback_tcp_endpoint() if endpoint == "explicit" else "tcp"
    done = pair("--target", "mock", "--json", "--endpoint", address, "--decoders", "root", "--prompt", "hi",
                "--max-new-tokens", "16")
    assert done.returncode == 0, done.stderr
    assert [r.decoder for r in decode_records(done.stdout)] == ["root"]
    shown = re.search(r"\[drafter\] loaded mock on cpu; serving on (\S+)", done.stderr).group(1)
    if endpoint == "explicit":
        assert shown == address
    else:  # a free loopback port, never an address reachable from elsewhere
        assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", shown), shown


@pytest.mark.slow
def test_a_users_key_starting_with_a_dash_carries_the_pair(tmp_path):
    """The launcher hands the target this user's public key; Z85 may start it with '-'."""
    directory = next(d for d in (tmp_path / f"keys{i}" for i in range(5000))
                     if own_keys(d).public.startswith(b"-"))
    done = pair("--target", "mock", "--json", "--endpoint", "tcp", "--key-dir", str(directory), "--decoders", "root",
                "--prompt", "hi", "--max-new-tokens", "16")
    assert done.returncode == 0, done.stderr
    assert [r.decoder for r in decode_records(done.stdout)] == ["root"]


@pytest.mark.slow
def test_killed_drafter_stops_the_launcher_and_the_target(launched):
    run = launched(*LONG_RUN)
    drafter, target = role_pids(run.pid)
    launched.pids += [drafter, target]
    run.wait_for_log("[target] drafter 'mock' ready")
    os.kill(drafter, signal.SIGKILL)
    t0 = time.monotonic()
    status = run.wait(20.0)
    assert status != 0
    assert time.monotonic() - t0 < 10.0
    wait_gone([drafter, target], 2.0)
    assert "[target] error: PeerDied: the drafter process closed its connection" in run.stderr
    assert "[launch] the drafter exited with status 137" in run.stderr  # 128 + SIGKILL


def socket_dir(stderr: str) -> str:
    return os.path.dirname(re.search(r"serving on ipc://(\S+)", stderr).group(1))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_stopping_the_launcher_leaves_no_process_behind(launched, how):
    run = launched(*LONG_RUN)
    drafter, target = role_pids(run.pid)
    launched.pids += [drafter, target]
    run.wait_for_log("[target] drafter 'mock' ready")
    if how == "ctrl-c":  # the terminal sends SIGINT to the whole foreground process group
        os.killpg(run.pid, signal.SIGINT)
    else:
        os.kill(run.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    status = run.wait(15.0)
    # A launcher killed outright cannot stop its children; they get SIGTERM from the kernel instead
    # (PR_SET_PDEATHSIG), so they too must be gone within a bound.
    wait_gone([drafter, target], 10.0)
    if how == "sigkill":
        assert status == -signal.SIGKILL
        shutil.rmtree(socket_dir(run.stderr))  # the launcher had no chance to remove it
    else:
        assert status == 128 + (signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
        assert not os.path.exists(socket_dir(run.stderr))  # the private socket directory is removed


@pytest.mark.slow
def test_folders_named_like_packages_in_the_callers_folder_do_not_shadow_them(tmp_path):
    """A user's models/ (checkpoints, say) or timing/ beside them must not replace the runtime's packages."""
    for name in ("models", "pipeline", "protocol", "timing", "launch"):
        (tmp_path / name).mkdir()
    (tmp_path / "p.txt").write_text("Once upon a time\n")
    done = pair("--target", "mock", "--json", "--decoders", "ar,root", "--max-new-tokens", "8",
                "--prompts", "p.txt", cwd=tmp_path)  # a path relative to the caller's folder
    assert done.returncode == 0, done.stderr
    assert [r.decoder for r in decode_records(done.stdout)] == ["ar", "root"]


def test_a_picked_budget_is_said_with_its_costs_and_the_run_and_verdict_use_it():
    texts = ("Once upon a time", "def fib(n):", "Hello", "A river", "Why?")
    prompts = [arg for text in texts for arg in ("--prompt", text)]
    done = pair("--target", "mock", "--decoders", "ar,draft", "--pick-budget", "--budget-max", "8", *prompts,
                "--max-new-tokens", "16")
    assert done.returncode == 0, done.stderr
    said = re.search(r"\[target\] budget (\d+), the most tokens a second on this machine: a plain pass [\d.]+ ms "
                     r"\([\d.]+ tokens a second\); tree passes of 1, 2, 4, 8 tokens [\d.]+, [\d.]+, [\d.]+, [\d.]+ ms; at a "
                     r"cautious τ of 1.40, 1.64, 1.87, 1.98 \(pipeline.budget.cautious\) rounds of each size promise "
                     r"[\d.]+, [\d.]+, [\d.]+, [\d.]+ tokens a second", done.stderr)
    assert said, done.stderr
    budget = said.group(1)
    assert f"T=0 B={budget};" in done.stdout and f" draft T=0 B={budget} " in done.stderr
    on = next((line for line in done.stdout.splitlines() if line.startswith("  on: ")), "")
    assert re.search(rf"here a plain pass takes [\d.]+ ms, draft's tree pass of {budget} tokens [\d.]+ ms", on), \
        done.stdout
