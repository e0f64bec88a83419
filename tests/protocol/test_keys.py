"""CURVE keys: made privately on first use, refused when others can read them, named as Z85 text or a key
file; a drafter with keys admits its own key and the authorized ones, and no one else."""

from __future__ import annotations

import os
import re
import stat

import pytest
import zmq

from protocol.errors import AccessDenied
from protocol.keys import (AUTHORIZED, PUBLIC, SECRET, KeyFileError, authorize, key_dir, own_keys, public_key,
                           trusted_keys)
from protocol.messages import PROTOCOL_VERSION, Ready
from protocol.transport import Channel, ClientKeys, Listener, ServerKeys

from tests.protocol.wire_peers import WAIT_S, FakeDrafter, hello


def test_the_keypair_is_made_privately_on_first_use_and_then_kept(tmp_path):
    directory = tmp_path / "keys"
    first = own_keys(directory)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / SECRET).stat().st_mode) == 0o600
    assert public_key(str(directory / PUBLIC)) == first.public  # the public half, to hand out
    assert own_keys(directory) == first
    assert len(first.public) == 40 and first.public != first.secret


def test_a_secret_key_others_can_read_is_refused(tmp_path):
    own_keys(tmp_path / "keys")
    os.chmod(tmp_path / "keys" / SECRET, 0o644)
    with pytest.raises(KeyFileError, match=rf"secret key {tmp_path}/keys/self.key_secret must belong to this user "
                                           rf"and be readable by it alone \(mode 0644\): run chmod 600"):
        own_keys(tmp_path / "keys")


def test_a_key_directory_others_can_enter_is_refused(tmp_path):
    (tmp_path / "keys").mkdir(mode=0o755)
    os.chmod(tmp_path / "keys", 0o755)
    with pytest.raises(KeyFileError, match=rf"key directory {tmp_path}/keys must belong to this user and be private "
                                           r"\(mode 0755\): run chmod 700"):
        own_keys(tmp_path / "keys")


def test_the_key_directory_defaults_to_the_environment_then_the_config_folder(monkeypatch, tmp_path):
    assert key_dir(str(tmp_path)) == tmp_path
    monkeypatch.setenv("SPECPAIR_KEYS", str(tmp_path / "env"))
    assert key_dir() == tmp_path / "env"
    monkeypatch.delenv("SPECPAIR_KEYS")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert key_dir() == tmp_path / "config" / "specpair" / "keys"


@pytest.mark.parametrize("text, match", [
    ("short", r"`drafter_key` 'short' is neither a 40-character Z85 public key nor a key file"),
    ("x" * 39 + "~", r"is neither a 40-character Z85 public key nor a key file"),  # ~ is not Z85
])
def test_a_malformed_public_key_names_the_option(text, match):
    with pytest.raises(KeyFileError, match=match):
        public_key(text)


def test_a_key_file_without_a_public_key_is_refused(tmp_path):
    (tmp_path / "x.key").write_text("metadata\n")
    with pytest.raises(KeyFileError, match=rf"key file {tmp_path}/x.key: No public key found"):
        public_key(str(tmp_path / "x.key"))


def test_authorized_keys_are_trusted_along_with_the_own_key(tmp_path):
    drafter_dir, target_dir = tmp_path / "drafter", tmp_path / "target"
    target = own_keys(target_dir)
    assert trusted_keys(drafter_dir) == {own_keys(drafter_dir).public}
    path = authorize(drafter_dir, target.public.decode())
    assert path.parent == drafter_dir / AUTHORIZED and path.suffix == ".key"
    assert authorize(drafter_dir, str(target_dir / PUBLIC)) == path  # the same key, as a file: once
    assert trusted_keys(drafter_dir) == {own_keys(drafter_dir).public, target.public}


@pytest.fixture
def curve_server(tmp_path, endpoint):
    """A CURVE Listener at `endpoint` trusting its key directory's keys, answering one Hello with Ready."""
    directory = tmp_path / "drafter"
    own = own_keys(directory)
    listener = Listener.bind(endpoint, ServerKeys(own, lambda key: key in trusted_keys(directory)))
    yield listener, own, directory
    listener.close()


def answer_one(listener) -> None:
    event = listener.recv(WAIT_S)
    while event is not None and not hasattr(event, "frames"):
        event = listener.recv(WAIT_S)
    assert event is not None, "no message reached the drafter"
    listener.send(event.peer, Ready(PROTOCOL_VERSION, 64, "f", "curve-drafter"))


def test_an_authorized_target_gets_through_encrypted(curve_server, endpoint, tmp_path):
    listener, own, directory = curve_server
    target = own_keys(tmp_path / "target")
    authorize(directory, target.public.decode())  # read at each connection: no restart needed
    channel = Channel.connect(endpoint, peer="drafter", keys=ClientKeys(target, own.public))
    try:
        channel.send(hello())
        answer_one(listener)
        assert channel.recv(WAIT_S, "ready_timeout", "handshake").model == "curve-drafter"
    finally:
        channel.close()


def test_an_unknown_target_key_is_refused_fast(curve_server, endpoint, tmp_path):
    listener, own, _ = curve_server
    stranger = own_keys(tmp_path / "stranger")
    channel = Channel.connect(endpoint, peer="drafter", keys=ClientKeys(stranger, own.public))
    try:
        with pytest.raises(AccessDenied, match=rf"the drafter at {endpoint} refused this side's key: on its host, "
                                               rf"run launch/pair.sh keys --allow '{re.escape(stranger.public.decode())}'$"):
            channel.send(hello())
            channel.recv(WAIT_S, "ready_timeout", "handshake")
        event = listener.recv(0.2)
        assert event is None or not hasattr(event, "frames")  # no message of the stranger's reached the drafter
    finally:
        channel.close()


def test_a_drafter_that_lacks_the_named_key_is_refused(endpoint, tmp_path):
    impostor = FakeDrafter(zmq.Context.instance().socket(zmq.ROUTER))
    impostor.sock.setsockopt(zmq.LINGER, 0)
    impostor.sock.curve_server = True
    impostor.sock.curve_publickey, impostor.sock.curve_secretkey = zmq.curve_keypair()
    impostor.sock.bind(endpoint)
    real = own_keys(tmp_path / "drafter")
    channel = Channel.connect(endpoint, peer="drafter", keys=ClientKeys(own_keys(tmp_path / "target"), real.public))
    try:
        with pytest.raises(AccessDenied, match=rf"the secure handshake with {endpoint} failed: the process there "
                                               rf"does not hold the secret key of `drafter_key` "
                                               rf"{re.escape(real.public.decode()[:8])}"):
            channel.send(hello())
            channel.recv(WAIT_S, "ready_timeout", "handshake")
        assert impostor.silent(0.1)  # no Hello, let alone a prompt, reached it
    finally:
        channel.close()
        impostor.close()
