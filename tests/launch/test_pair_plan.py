"""The launcher's plan: an endpoint another process holds is refused before either process starts; every
endpoint but the private ipc one carries CURVE with this user's keys; --drafter-at starts the target alone,
with the drafter's key for a drafter beyond this machine; the drafter process encrypts what leaves it."""

from __future__ import annotations

import os
import re
import socket

import pytest

from launch.pair import plan
from pipeline.config import ConfigError
from programs import keys_program
from programs.drafter_program import server_keys
from programs.options import KeyOptions, RunOptions
from programs.target_program import build_parser, parse
from protocol.keys import key_dir, own_keys
from protocol.transport import Listener, loopback_tcp_endpoint
from target_proc.session import InsecureEndpoint, client_keys


def usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        plan(["--target", "mock", *argv])
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def option(argv: list[str], name: str) -> str:
    glued = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    return glued[0] if glued else argv[argv.index(name) + 1]


DASHED_KEY = "-L]*n" * 8  # Z85 of b"\xc5" * 32: a key may start with '-', which argparse reads as a flag


def test_an_ipc_endpoint_in_use_is_refused_before_any_process_starts(capsys, endpoint):
    listener = Listener.bind(endpoint)
    try:
        path = endpoint[len("ipc://"):]
        assert usage_error(capsys, "--endpoint", endpoint) == (
            f"launch/pair.sh: error: --endpoint {endpoint}: another process listens on {path}; stop it or name "
            f"another endpoint")
    finally:
        listener.close()


def test_a_tcp_port_in_use_is_refused_before_any_process_starts(capsys):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert usage_error(capsys, "--endpoint", f"tcp://127.0.0.1:{port}") == (
            f"launch/pair.sh: error: --endpoint tcp://127.0.0.1:{port}: port {port} on 127.0.0.1 is taken by another "
            f"process; stop it or name another endpoint")


def test_a_sweeps_out_that_is_a_file_is_refused_before_any_process_starts(capsys, tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(SystemExit) as exited:
        plan(["sweep", "--target", "mock", "--out", str(file)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"launch/pair.sh sweep: error: --out {file} is not a directory")


def test_the_private_ipc_endpoint_goes_in_clear_and_records_its_owner():
    p = plan(["--target", "mock"])
    try:
        assert "--curve" not in p.drafter and option(p.target, "--drafter-key") == ""
        assert open(os.path.join(p.private_dir, "launcher.pid")).read().strip() == str(os.getpid())
    finally:
        for name in os.listdir(p.private_dir):
            os.unlink(os.path.join(p.private_dir, name))
        os.rmdir(p.private_dir)


@pytest.mark.parametrize("endpoint", ["tcp", "loopback-port", "ipc-path"])
def test_any_other_endpoint_carries_curve_with_this_users_keys(endpoint, tmp_path):
    address = {"tcp": "tcp", "loopback-port": loopback_tcp_endpoint(),
               "ipc-path": f"ipc://{tmp_path}/d.sock"}[endpoint]
    p = plan(["--target", "mock", "--endpoint", address])
    own = own_keys(key_dir())
    assert "--curve" in p.drafter
    assert option(p.target, "--drafter-key") == own.public.decode()  # the drafter holds this user's keypair
    assert option(p.drafter, "--endpoint") == option(p.target, "--endpoint")


def test_the_launchers_drafter_grants_its_target_the_context_it_asks_for():
    p = plan(["--target", "mock", "--endpoint", "tcp", "--max-context", "40000"])
    assert option(p.drafter, "--max-request-context") == "40000" == option(p.target, "--max-context")


@pytest.mark.parametrize("mode", [[], ["sweep", "--out", "runs/x"]])
def test_the_launchers_drafter_is_private_to_its_target(mode):
    # It exits once its one target has gone, so no drafter outlives a pair whose launcher's death went unsaid
    assert "--exit-with-target" in plan([*mode, "--target", "mock"]).drafter
    assert "--exit-with-target" not in plan(["--target", "mock"]).target


@pytest.mark.parametrize("value, message", [
    ("8", r"--max-request-context must be an integer >= 16, got 8"),
    (str(2**21), r"--max-request-context must be at most 1048576 \(the KV slots a handshake carries\), got 2097152"),
])
def test_a_drafters_request_limit_is_checked_where_it_is_read(capsys, value, message):
    from programs.drafter_program import main as drafter_main

    with pytest.raises(SystemExit) as exited:
        drafter_main(["--model", "mock", "--endpoint", "tcp://127.0.0.1:5555", "--max-request-context", value])
    assert exited.value.code == 2
    assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])


def test_a_remote_drafter_runs_the_target_alone():
    key = own_keys(key_dir()).public.decode()
    p = plan(["--target", "mock", "--drafter-at", "tcp://10.1.2.3:5555", "--drafter-key", key])
    assert p.drafter is None and p.private_dir is None
    assert option(p.target, "--endpoint") == "tcp://10.1.2.3:5555" and option(p.target, "--drafter-key") == key


@pytest.mark.parametrize("spelt", ["space", "equals"])
def test_a_drafter_key_starting_with_a_dash_reaches_the_target_whole(spelt):
    given = ["--drafter-key", DASHED_KEY] if spelt == "space" else [f"--drafter-key={DASHED_KEY}"]
    p = plan(["--target", "mock", "--drafter-at", "tcp://10.1.2.3:5555", *given, "--prompt=-x"])
    assert f"--drafter-key={DASHED_KEY}" in p.target and "--prompt=-x" in p.target
    args = parse(build_parser("target", "", RunOptions), p.target[p.target.index("programs.target_program") + 1:],
                 RunOptions)
    assert args.connect.drafter_key == DASHED_KEY and args.run.sources.prompt == ("-x",)


def test_a_missing_key_value_is_still_named(capsys):
    assert "argument --drafter-key: expected one argument" in usage_error(
        capsys, "--drafter-at", "tcp://10.1.2.3:5555", "--drafter-key", "--decoders", "ar")


@pytest.mark.parametrize("argv, message", [
    (["--drafter-at", "tcp://10.1.2.3:5555"], r"--drafter-at tcp://10.1.2.3:5555 is beyond this machine: name the "
                                              r"drafter's public key with --drafter-key"),
    (["--drafter-at", "tcp://10.1.2.3"], r"--drafter-at 'tcp://10.1.2.3' must look like tcp://HOST:PORT"),
    (["--drafter-at", "tcp://127.0.0.1:5555", "--endpoint", "tcp"], r"--endpoint is where a local drafter binds"),
    (["--drafter-at", "tcp://127.0.0.1:5555", "--drafter", "mock"], r"--drafter names the model of a local drafter"),
    (["--drafter-key", "x" * 40], r"--drafter-key names a drafter started elsewhere: it goes with --drafter-at"),
    (["--endpoint", "ipc:///tmp/" + "d" * 100 + ".sock"], r"a socket path holds at most 107 bytes, this one 110"),
    (["--max-context", str(2**40)], r"--max-context must be at most 1048576 \(KV slots, what a handshake may ask "
                                    r"of a drafter\), got 1099511627776"),
    (["--mock-vocab", str(10**9)], r"--mock-vocab must be at most 1048576 \(tokens\), got 1000000000"),
    (["--mock-vocab", "1e9"], r"argument --mock-vocab: invalid int value: '1e9'"),
    (["--threads", str(10**6)], r"--threads must be at most 1024 \(threads\), got 1000000"),
], ids=["remote-without-key", "remote-malformed", "remote-and-endpoint", "remote-and-drafter-model",
        "key-without-remote", "long-ipc-path", "max-context", "mock-vocab", "mock-vocab-float", "threads"])
def test_bad_connection_options_are_usage_errors_naming_them(capsys, argv, message):
    assert re.search(message, usage_error(capsys, *argv))


def test_a_drafter_encrypts_every_tcp_endpoint_loopback_included(tmp_path):
    options = KeyOptions(key_dir=str(tmp_path / "keys"))
    assert server_keys("ipc:///tmp/d.sock", options) is None
    for endpoint in ("tcp://127.0.0.1:5555", "tcp://0.0.0.0:5555", "tcp://10.1.2.3:5555", "tcp://*:5555"):
        keys = server_keys(endpoint, options)
        assert keys.own == own_keys(tmp_path / "keys") and keys.trusted(keys.own.public)
        assert not keys.trusted(b"x" * 40)
    assert server_keys("ipc:///tmp/d.sock", KeyOptions(str(tmp_path / "keys"), curve=True)) is not None


def test_a_drafter_serves_loopback_tcp_in_clear_only_when_asked_and_warns(tmp_path, caplog):
    options = KeyOptions(key_dir=str(tmp_path / "keys"))
    assert server_keys("tcp://127.0.0.1:5555", options, clear=True) is None
    assert "serving tcp://127.0.0.1:5555 in clear (--clear): any process of this host can connect" in caplog.text
    for endpoint in ("tcp://0.0.0.0:5555", "tcp://10.1.2.3:5555", "ipc:///tmp/d.sock"):
        with pytest.raises(ConfigError, match=rf"`clear` applies to a loopback tcp endpoint without --curve only "
                                              rf".*got {re.escape(endpoint)}"):
            server_keys(endpoint, options, clear=True)
    with pytest.raises(ConfigError, match=r"`clear` applies"):
        server_keys("tcp://127.0.0.1:5555", KeyOptions(str(tmp_path / "keys"), curve=True), clear=True)


def test_a_target_refuses_a_drafter_beyond_this_machine_without_its_key():
    with pytest.raises(InsecureEndpoint, match=r"`endpoint` tcp://10.1.2.3:5555 is beyond this machine: name the "
                                               r"drafter's public key with `drafter_key`"):
        client_keys("tcp://10.1.2.3:5555")
    assert client_keys("tcp://127.0.0.1:5555") is None and client_keys("ipc:///tmp/x") is None


def test_the_keys_program_prints_the_public_key_and_authorizes_targets(capsys, tmp_path):
    target = own_keys(tmp_path / "target").public.decode()
    assert keys_program.main(["--key-dir", str(tmp_path / "drafter"), "--allow", target]) == 0
    out = capsys.readouterr().out
    own = own_keys(tmp_path / "drafter").public.decode()
    assert f"public key: {own}" in out and f"--drafter-key '{own}'" in out
    assert "a drafter here accepts this key and 1 more" in out
    assert re.search(r"authorized \S+/authorized/target-\w+\.key", out)


def test_the_keys_program_authorizes_a_key_starting_with_a_dash(capsys, tmp_path):
    assert keys_program.main(["--key-dir", str(tmp_path / "drafter"), "--allow", DASHED_KEY]) == 0
    assert "a drafter here accepts this key and 1 more" in capsys.readouterr().out


def test_the_keys_program_names_a_bad_key(capsys, tmp_path):
    assert keys_program.main(["--key-dir", str(tmp_path / "drafter"), "--allow", "nonsense"]) == 2
    assert "--allow 'nonsense' is neither a 40-character Z85 public key nor a key file" in capsys.readouterr().err


def test_the_target_process_refuses_a_socket_path_too_long_for_unix_sockets(capsys):
    from programs import target_program
    from programs.options import RunOptions

    parser = target_program.build_parser("python -m programs.target_program", "", RunOptions)
    with pytest.raises(SystemExit):
        target_program.parse(parser, ["--endpoint", "ipc:///tmp/" + "d" * 100 + ".sock"], RunOptions)
    assert "error: --endpoint 'ipc:///tmp/dddd" in capsys.readouterr().err


def test_a_cuda_device_without_cuda_is_a_usage_error_of_the_process(caplog):
    from models.cuda_env import CudaUnavailable
    from programs.cli import EXIT_USAGE, Flags, run_program

    def body():
        raise CudaUnavailable("--device cuda:0 needs CUDA, but this torch is a CPU-only build")

    assert run_program(body, Flags()) == EXIT_USAGE
    assert [r.getMessage() for r in caplog.records] == ["--device cuda:0 needs CUDA, but this torch is a CPU-only build"]


def test_a_misspelt_command_is_named_with_the_commands_there_are(capsys):
    assert usage_error(capsys, "reprot", "runs/x") == (
        "launch/pair.sh: error: unknown command 'reprot' (did you mean 'report'?): the commands are sweep, report, "
        "matched, export, values, drafter, keys, pool, train-head, or options alone to decode")
    with pytest.raises(SystemExit):
        plan(["--help"])
    assert capsys.readouterr().out.startswith(
        "usage: launch/pair.sh [sweep|report|matched|export|values|drafter|keys|pool|train-head] [options]")


def test_the_sweeps_help_describes_the_sweep(capsys):
    with pytest.raises(SystemExit):
        plan(["sweep", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: launch/pair.sh sweep ") and "Run a timing sweep with its own drafter" in out


def test_the_drafters_help_lists_no_target_only_option_and_its_launch_passes_none(capsys):
    from launch.pair import main
    from models.options import TARGET_ONLY

    with pytest.raises(SystemExit):
        main(["drafter", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: launch/pair.sh drafter ") and "--threads" in out
    listed = re.findall(r"^\s+(--[a-z-]+)", out, re.M)  # options as the help lists them (its text may name others)
    assert "--threads" in listed and not [name for name in TARGET_ONLY if "--" + name.replace("_", "-") in listed]
    p = plan(["--target", "mock", "--solo-threads", "2", "--max-context", "512"])
    try:
        assert "--solo-threads" not in p.drafter and "--max-context" not in p.drafter
        assert option(p.target, "--solo-threads") == "2" and option(p.target, "--max-context") == "512"
    finally:
        import shutil

        shutil.rmtree(p.private_dir, ignore_errors=True)


@pytest.mark.parametrize("argv, required", [(["sweep", "--help"], "--out DIR"), (["drafter", "--help"], "--endpoint ADDR")])
def test_required_options_are_shown_as_required(capsys, argv, required):
    from launch.pair import main

    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    usage = out[: out.index("\n\n")]
    assert f" {required} " in usage.replace("\n", " ") and f"[{required}]" not in usage
    described = re.search(rf"\n  {re.escape(required)}\s(.*?)(?=\n  -|\n\n)", out[len(usage):], re.S).group(1)
    assert " ".join(described.split()).endswith("(required)")


def test_the_paper_pool_flag_gives_the_papers_pool_to_the_embedded_pair(capsys, tmp_path):
    target = plan(["sweep", "--paper-pool", "--out", str(tmp_path / "run"), "--prompts", "humaneval"]).target
    at = target.index("--pool-topk")
    assert target[at: at + 6] == ["--pool-topk", "10", "--pool-depth", "8", "--pool-expand", "10"]
    with pytest.raises(SystemExit):
        plan(["--paper-pool", "--pool-depth", "3"])
    assert "--paper-pool sets --pool-topk" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [[], ["sweep", "--out", "unused"]])
def test_a_missing_prompt_file_is_named_in_one_line_before_any_process_starts(capsys, tmp_path, mode):
    for source, said in ((str(tmp_path / "p.jsonl"), f"prompt file '{tmp_path / 'p.jsonl'}' does not exist"),
                         (f"spec-bench:{tmp_path}/q.jsonl", f"prompt file '{tmp_path}/q.jsonl' does not exist")):
        with pytest.raises(SystemExit) as exited:
            plan([*mode, "--target", "mock", "--prompts", source])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "usage" not in err


def test_a_context_the_hosts_memory_cannot_hold_is_refused_before_any_process_starts(capsys, monkeypatch):
    monkeypatch.setattr("launch.pair.host_free_bytes", lambda: 3 << 20)
    plan(["--target", "random:tiny", "--drafter", "random:tiny", "--max-context", "1024"])  # 2 x 0.6 MiB: fits
    with pytest.raises(SystemExit) as exited:
        plan(["--target", "random:tiny", "--drafter", "random:tiny", "--max-context", "16384"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == ("launch/pair.sh: error: --max-context 16384: the KV caches of 16384 slots take the target's "
                   "8.1 MiB and the drafter's 8.1 MiB, and this host has 3.0 MiB free; lower --max-context\n")


def test_a_rounds_directory_that_cannot_take_this_runs_rounds_is_refused_before_any_process_starts(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "rounds.shard-1-of-1.bin").write_bytes(b"")
    refused = "holds rounds.shard-1-of-1.bin already; write elsewhere (--record-rounds NEW_DIR) or give --overwrite"
    for given, said in (("file", "is not a directory"), ("", refused)):
        with pytest.raises(SystemExit) as exited:
            plan(["--target", "mock", "--record-rounds", str(tmp_path / given)])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--record-rounds" in err and said in err


@pytest.mark.parametrize("mode, flag, where, said", [
    (["sweep"], "--out", "file/x", "cannot be made: a directory on its way is a file"),
    (["sweep"], "--out", "/proc/1/x", "cannot be made"),
    (["sweep"], "--out", "x" * 300, "a name in it is 300 bytes long; a file system takes at most 255"),
    ([], "--record-rounds", "file/x", "cannot be made: a directory on its way is a file"),
    ([], "--prompts", "fifo", "is a FIFO, not a regular file"),
    ([], "--prompts", "/dev/zero", "is a device, not a regular file"),
])
def test_a_path_that_cannot_be_used_is_one_line_before_any_process_starts(capsys, tmp_path, mode, flag, where, said):
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(SystemExit) as exited:
        plan([*mode, "--target", "mock", flag, path])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_the_default_run_decodes_every_builtin_prompt_at_the_embedded_length():
    target = plan([]).target
    assert not any(a.startswith("--prompt") for a in target)  # no prompt named: the target takes the built-in ones
    assert target[target.index("--max-new-tokens") + 1] == "64"


def test_a_sweeps_option_on_a_decode_run_is_named_with_the_runs_own(capsys):
    with pytest.raises(SystemExit):
        plan(["--target", "mock", "--budgets", "8,16"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --budgets 8,16 (--budgets is a sweep's option, launch/pair.sh sweep ...; " \
           "a decode run's is --budget)" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        plan(["--target", "mock", "--no-such-flag"])
    assert "sweep" not in capsys.readouterr().err


def test_a_missing_model_is_said_once_before_any_process_starts(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(SystemExit):
        plan(["--target", "no-such/model", "--drafter", "no-such/model:int8", "--prompt", "hi"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].count("'no-such/model'") == 1 and "--allow-download" in err[0]


def test_an_eagle3_drafter_is_told_its_target():
    """An EAGLE-3 head takes its target's tokenizer and embedding: the launcher names the target to it."""
    p = plan(["--target", "random:tiny", "--drafter", "random:eagle3-tiny", "--prompt", "hi"])
    assert option(p.drafter, "--head-target") == "random:tiny"
    standalone = plan(["--target", "random:tiny", "--drafter", "random:tiny", "--prompt", "hi"])
    assert option(standalone.drafter, "--head-target") == ""


def test_a_missing_eagle3_head_is_named_by_its_path_before_any_process_starts(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    head = tmp_path / "head"
    head.mkdir()
    plan(["--target", "random:tiny", "--drafter", f"eagle3:{head}", "--prompt", "hi"])  # a directory: the load reads it
    with pytest.raises(SystemExit):
        plan(["--target", "random:tiny", "--drafter", "eagle3:no-such/head", "--prompt", "hi"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'no-such/head'" in err[0]
