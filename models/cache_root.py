"""Where the project keeps what it makes once per machine: the converted default model, the CPU linear
kernels' choice and budget auto's pass timings beside it. `$SPECPAIR_CACHE`, else `$XDG_CACHE_HOME/specpair`,
else `~/.cache/specpair`."""

from __future__ import annotations

import os
from pathlib import Path

EMBEDDED_DIR = "smollm2-135m-instruct-f32"  # the embedded default, converted once to a float32 checkpoint


def cache_root() -> Path:
    """The cache directory (not made here)."""
    if own := os.environ.get("SPECPAIR_CACHE"):
        return Path(own).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "specpair"


def embedded_dir() -> Path:
    """Where the converted embedded default lies (models.load.embedded_checkpoint makes it)."""
    return cache_root() / EMBEDDED_DIR
