"""CURVE keys of encrypted connections: this user's keypair in a private directory, and the targets it trusts.

A key directory (default $SPECPAIR_KEYS, else ~/.config/specpair/keys) holds

    self.key          this host's public key (ZeroMQ certificate format; safe to share)
    self.key_secret   its secret key: mode 0600, in a directory of mode 0700, never shared
    authorized/*.key  public keys of the targets a drafter here accepts, one file each

and is created, with a fresh keypair, on first use. A drafter accepts its own key and the authorized ones,
so a target run by the same user from the same directory (or a copy of it) needs no setup. Keys given on
the command line are either the 40-character Z85 text of a public key or the path of a .key file."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from pipeline.config import InputError

ENV = "SPECPAIR_KEYS"
PUBLIC, SECRET, AUTHORIZED = "self.key", "self.key_secret", "authorized"
Z85_KEY_LENGTH = 40
_Z85 = set(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#")


class KeyFileError(InputError):
    """A key or key directory is missing, malformed, or readable by other users."""


@dataclass(frozen=True, slots=True)
class Keypair:
    public: bytes  # Z85, 40 bytes
    secret: bytes


def key_dir(path: str = "") -> Path:
    """The key directory: `path`, else $SPECPAIR_KEYS, else ~/.config/specpair/keys."""
    if path:
        return Path(path).expanduser()
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path("~/.config").expanduser()
    return Path(config) / "specpair" / "keys"


def own_keys(directory: Path) -> Keypair:
    """This user's keypair from `directory`, made there (privately) on first use."""
    _private_dir(directory)
    secret_path = directory / SECRET
    if not secret_path.exists():
        _generate(directory)
    _private_file(secret_path)
    public, secret = _load(secret_path)
    if secret is None:
        raise KeyFileError(f"{secret_path} holds no secret-key line; move it away to make a new keypair")
    if not (directory / PUBLIC).exists():  # a copy of the public half, to hand to peers
        _write(directory / PUBLIC, _certificate(public, None), 0o644, replace=True)
    return Keypair(public, secret)


def trusted_keys(directory: Path) -> set[bytes]:
    """The public keys a drafter with this key directory accepts: its own and every authorized/*.key."""
    keys = {own_keys(directory).public}
    folder = directory / AUTHORIZED
    if folder.is_dir():
        keys.update(_load(path)[0] for path in sorted(folder.glob("*.key")))
    return keys


def public_key(text: str, name: str = "drafter_key") -> bytes:
    """A public key given as Z85 text or as the path of a key file; KeyFileError naming `name` otherwise."""
    raw = text.strip().encode()
    if len(raw) == Z85_KEY_LENGTH and set(raw) <= _Z85:
        return raw
    path = Path(text).expanduser()
    if not path.is_file():
        raise KeyFileError(f"`{name}` {text!r} is neither a {Z85_KEY_LENGTH}-character Z85 public key nor a key "
                           f"file (launch/pair.sh keys prints a host's public key)")
    return _load(path)[0]


def authorize(directory: Path, text: str) -> Path:
    """Add a target's public key (Z85 text or a key file) to the keys a drafter here accepts -> its file."""
    key = public_key(text, "allow")
    own_keys(directory)  # the directory exists, privately
    folder = directory / AUTHORIZED
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"target-{''.join(c for c in key.decode() if c.isalnum())[:12]}.key"
    if not path.exists():
        _write(path, _certificate(key, None), 0o644)
    return path


def _generate(directory: Path) -> None:
    """A new keypair; two processes generating at once keep the one that was linked into place first."""
    public, secret = zmq.curve_keypair()
    tmp = directory / f".{SECRET}.{os.getpid()}"
    _write(tmp, _certificate(public, secret), 0o600)
    try:
        os.link(tmp, directory / SECRET)  # atomic, and fails if the other process won
    except FileExistsError:
        pass
    else:
        _write(directory / PUBLIC, _certificate(public, None), 0o644, replace=True)
    finally:
        tmp.unlink()


def _private_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError as e:
        raise KeyFileError(f"key directory {directory}: {e.strerror}") from None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KeyFileError(f"key directory {directory} must belong to this user and be private (mode "
                           f"{stat.S_IMODE(info.st_mode):04o}): run chmod 700 {directory}")


def _private_file(path: Path) -> None:
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise KeyFileError(f"secret key {path} must belong to this user and be readable by it alone (mode "
                           f"{stat.S_IMODE(info.st_mode):04o}): run chmod 600 {path}")


def _load(path: Path) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise KeyFileError(f"key file {path}: {e}") from None
    if len(public) != Z85_KEY_LENGTH or not set(public) <= _Z85:
        raise KeyFileError(f"key file {path}: its public-key is not a {Z85_KEY_LENGTH}-character Z85 key")
    return public, secret


def _certificate(public: bytes, secret: bytes | None) -> str:
    """A ZeroMQ certificate (ZPL), as zmq.auth writes and reads them."""
    lines = [f"#   ZeroMQ CURVE {'Secret' if secret else 'Public'} Certificate, made by specpair on "
             f"{time.strftime('%Y-%m-%d')}",
             "#   " + ("Never share this file." if secret else "Exchange it with the peers that should trust it."),
             "", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int, replace: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)
