"""Where and with what a run ran: host, CPU, accelerators, package versions, the git commit and whether the
tree had uncommitted changes. Recorded once per run (a decode run's header line, a sweep's config.json)."""

from __future__ import annotations

import importlib.metadata
import platform
import socket
import subprocess
import time
from pathlib import Path

from models.cuda_env import cuda_driver
from models.kernel_cache import processor, usable_cpus

PACKAGES = ("torch", "transformers", "numpy", "pyzmq", "msgpack", "cuda-python")
PROJECT = Path(__file__).resolve().parent.parent


def environment() -> dict:
    import torch

    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname(),
            "platform": platform.platform(), "python": platform.python_version(),
            "cpu": processor(), "cpu_vectors": vector_width(),
            "cpu_count": usable_cpus(),
            "gpus": gpus(), "cuda_driver": cuda_driver(),
            "torch_cuda": torch.version.cuda, "packages": {name: version(name) for name in PACKAGES},
            "git": git_state()}


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo); empty where unknown."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    except OSError:
        return set()


def vector_width(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The widest vector arithmetic the CPU's flags name ("AVX-512", "AVX2", "AVX"), None where unknown: a tree
    pass is bound by arithmetic where the vectors are narrow, so figures differ with it."""
    flags = cpu_flags(cpuinfo)
    return next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX")) if flag in flags),
                None)


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_state() -> dict:
    """{"commit": HEAD or None, "dirty": whether tracked files differ from it} of the project's checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=PROJECT, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def gpus() -> list[str]:
    """Names of the CUDA devices this process sees (none when CUDA is absent)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
