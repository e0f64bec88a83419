"""What the CUDA stack of this process is, and why CUDA is unusable when it is.

torch only says `torch.cuda.is_available()`; a user who asked for a GPU needs the reason and the fix: a
CPU-only torch build, no driver or no device, or a driver older than the CUDA runtime torch was built
for. The driver's version comes from libcuda itself, so it is known even when torch cannot use it.

`python -m models.cuda_env` prints one line describing the stack and exits 1 when CUDA is unusable;
with --json, the report as one JSON document (what require_cuda_in_child reads)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import InputError

KEEP = "launch/setup.sh keeps a torch installed there"


class CudaUnavailable(InputError):
    """CUDA was asked for, and torch cannot use it; the message says why and what to change.
    An InputError: like a bad option, it is the user's to fix, and the programs report it as one."""


@dataclass(frozen=True, slots=True)
class CudaReport:
    torch: str  # torch.__version__
    torch_cuda: str | None  # CUDA runtime torch was built with (torch.version.cuda); None: a CPU-only build
    driver: str | None  # highest CUDA version the installed driver supports, e.g. "12.8"; None: no driver
    devices: int  # CUDA devices torch sees
    problem: str | None  # why CUDA is unusable; None when it is usable
    fix: str = ""  # what to change, when CUDA is unusable
    detail: str = ""  # torch's own message, when it gave one

    @property
    def usable(self) -> bool:
        return self.problem is None

    def message(self, what: str = "this run") -> str:
        """One paragraph for a user who asked for CUDA: the versions, the reason, the fix."""
        text = (f"{what} needs CUDA, but {self.problem} (torch {self.torch}, built for CUDA "
                f"{self.torch_cuda or 'none: CPU-only'}; driver supports CUDA {self.driver or 'none'}).")
        if self.detail:
            text += f" torch says: {self.detail}"
        return f"{text} Fix: {self.fix}."


def cuda_driver() -> str | None:
    """The CUDA version the installed driver supports, e.g. "12.8"; None without a driver.
    torch reports only the CUDA runtime it was built with; the driver is asked through cuda-python's driver binding,
    which needs neither a CUDA context nor a working torch."""
    try:
        from cuda.bindings import driver
        err, version = driver.cuDriverGetVersion()
    except Exception:  # no cuda-python, or no libcuda to load: either way, no driver to report
        return None
    if err != driver.CUresult.CUDA_SUCCESS or version <= 0:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def explain(torch_cuda: str | None, driver: str | None, available: bool, devices: int,
            visible: str | None = None) -> tuple[str, str] | None:
    """(why CUDA is unusable, what to change), from what torch and the driver report; None when usable."""
    if available and devices > 0:
        return None
    matching = f"the torch build for CUDA {driver} or older" if driver else "a CUDA build of torch"
    if torch_cuda is None:
        return "this torch is a CPU-only build", f"install into .venv {matching} ({KEEP})"
    if driver is None:
        return ("no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)",
                "install the NVIDIA driver, or run on the CPU")
    if _version_tuple(driver) < _version_tuple(torch_cuda):
        return (f"the driver (CUDA {driver}) is older than the CUDA runtime torch was built with ({torch_cuda})",
                f"install into .venv {matching} ({KEEP}), or update the NVIDIA driver")
    if visible is not None and not visible.strip():
        return "CUDA_VISIBLE_DEVICES is empty, which hides every device", "unset CUDA_VISIBLE_DEVICES"
    if devices == 0:
        where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible else ""
        return (f"the driver reports no usable CUDA device{where}",
                "check nvidia-smi and CUDA_VISIBLE_DEVICES")
    return "torch.cuda.is_available() is False", "check nvidia-smi"


def cuda_report() -> CudaReport:
    """Ask torch and the driver; initialises CUDA when it is there (a context is not created)."""
    import torch

    available, detail = torch.cuda.is_available(), ""
    devices = torch.cuda.device_count() if available else 0
    if not available and torch.version.cuda is not None:
        try:
            torch.cuda.init()  # raises with torch's own reason (a driver too old, no device, ...)
        except (RuntimeError, AssertionError) as e:
            detail = " ".join(str(e).split())
    driver = cuda_driver()
    problem, fix = explain(torch.version.cuda, driver, available, devices,
                           os.environ.get("CUDA_VISIBLE_DEVICES")) or (None, "")
    return CudaReport(torch.__version__, torch.version.cuda, driver, devices, problem, fix, detail)


def require_cuda(what: str) -> CudaReport:
    """The report when CUDA is usable; otherwise raise CudaUnavailable saying why and how to fix it.
    `what` names what asked for CUDA in the message, e.g. "--gpus 0,1"."""
    report = cuda_report()
    if not report.usable:
        raise CudaUnavailable(report.message(what))
    return report


def require_cuda_in_child(what: str) -> CudaReport:
    """require_cuda, answered by a child process, so that this process never initialises CUDA.
    For a launcher that forks its children with a preexec_fn: once CUDA is initialised, the driver's threads run, and a
    fork of a multi-threaded process may deadlock before it reaches exec."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-P", "-m", "models.cuda_env", "--json"], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=300)
    try:
        report = CudaReport(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, TypeError):
        said = " ".join(done.stderr.split()[-60:]) or "nothing"
        raise CudaUnavailable(f"{what} needs CUDA, but the process that checks CUDA failed (exit status "
                              f"{done.returncode}), saying: {said}") from None
    if not report.usable:
        raise CudaUnavailable(report.message(what))
    return report


def describe(report: CudaReport) -> str:
    """One line: torch, its CUDA, the driver, the devices."""
    return (f"torch {report.torch}, CUDA runtime {report.torch_cuda or 'none (CPU-only build)'}, driver CUDA "
            f"{report.driver or 'none'}, {report.devices} device(s)")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def main(argv: list[str] | None = None) -> int:
    report = cuda_report()
    if (sys.argv[1:] if argv is None else argv) == ["--json"]:
        print(json.dumps(dataclasses.asdict(report)))
        return 0 if report.usable else 1
    print(describe(report))
    if not report.usable:
        print(report.message(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
