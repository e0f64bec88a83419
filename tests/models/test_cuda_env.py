"""Without usable CUDA, the report names torch's version, its CUDA runtime, the driver, the reason and
the fix; torch's and the driver's answers are stood in for, so every case runs on the CPU."""

from __future__ import annotations

import os

import pytest
import torch

from models import cuda_env
from models.cuda_env import CudaUnavailable, cuda_report, explain, require_cuda


@pytest.fixture
def machine(monkeypatch):
    """Set what torch and the driver answer: machine(torch_cuda=..., driver=..., available=..., ...)."""
    def set_answers(torch_cuda, driver, available, devices=0, init_error=None, visible=None):
        monkeypatch.setattr(torch.version, "cuda", torch_cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
        monkeypatch.setattr(cuda_env, "cuda_driver", lambda: driver)

        def init():
            if init_error:
                raise RuntimeError(init_error)
        monkeypatch.setattr(torch.cuda, "init", init)
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return set_answers


def test_cpu_only_build_is_named_with_torch_version(machine):
    machine(torch_cuda=None, driver="12.8", available=False)
    report = cuda_report()
    assert not report.usable and "CPU-only build" in report.problem
    message = report.message("--gpus 0")
    assert message.startswith("--gpus 0 needs CUDA") and torch.__version__ in message
    assert "CUDA 12.8 or older" in message and ".venv" in message and "keeps" in message


def test_driver_older_than_torch_runtime_names_both_versions(machine):
    machine(torch_cuda="13.0", driver="12.8", available=False,
            init_error="The NVIDIA driver on your system is too old (found version 12080).")
    report = cuda_report()
    assert "driver (CUDA 12.8) is older than the CUDA runtime torch was built with (13.0)" in report.problem
    message = report.message()
    assert "built for CUDA 13.0" in message and "driver supports CUDA 12.8" in message
    assert "too old (found version 12080)" in message  # torch's own words come along
    assert "the torch build for CUDA 12.8 or older" in report.fix and "update the NVIDIA driver" in report.fix


def test_missing_driver_is_named(machine):
    machine(torch_cuda="12.8", driver=None, available=False, init_error="Found no NVIDIA driver on your system.")
    report = cuda_report()
    assert "no NVIDIA driver" in report.problem and report.driver is None
    assert "driver supports CUDA none" in report.message()


def test_no_device_and_hidden_devices_are_told_apart(machine):
    machine(torch_cuda="12.8", driver="12.8", available=False, visible="")
    assert "CUDA_VISIBLE_DEVICES is empty" in cuda_report().problem
    machine(torch_cuda="12.8", driver="13.0", available=False, visible="3")
    assert cuda_report().problem == "the driver reports no usable CUDA device (CUDA_VISIBLE_DEVICES=3)"


def test_usable_cuda_has_no_problem(machine):
    machine(torch_cuda="13.0", driver="13.0", available=True, devices=2)
    report = require_cuda("--gpus 0,1")
    assert report.usable and report.devices == 2 and report.problem is None


def test_require_cuda_raises_with_the_fix(machine):
    machine(torch_cuda=None, driver=None, available=False)
    with pytest.raises(CudaUnavailable, match=r"--gpus 0 needs CUDA, but this torch is a CPU-only build .*Fix: "):
        require_cuda("--gpus 0")


def test_a_newer_driver_is_never_blamed():
    assert explain("12.6", "12.8", False, 0)[0] == "the driver reports no usable CUDA device"
    assert explain("12.8", "12.10", False, 1)[0] == "torch.cuda.is_available() is False"  # 12.10 > 12.8
    assert explain("13.0", "13.0", True, 1) is None


def test_driver_version_without_a_driver_is_none():
    # This machine has no NVIDIA driver; cuda-python cannot load libcuda, and the answer is None.
    pytest.importorskip("cuda.bindings")
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("an NVIDIA driver is installed here")
    assert cuda_env.cuda_driver() is None


def test_driver_version_reads_the_driver_binding(monkeypatch):
    from cuda.bindings import driver

    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: (driver.CUresult.CUDA_SUCCESS, 12080))
    assert cuda_env.cuda_driver() == "12.8"
    monkeypatch.setattr(driver, "cuDriverGetVersion", lambda: (driver.CUresult.CUDA_ERROR_NOT_INITIALIZED, 0))
    assert cuda_env.cuda_driver() is None


def test_loading_on_cuda_without_cuda_stops_with_the_reason(machine, monkeypatch):
    from models.load import load
    from models.options import ModelOptions

    machine(torch_cuda=None, driver=None, available=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # load() sets this process's threads
    with pytest.raises(CudaUnavailable, match=r"--device cuda:0 needs CUDA, but this torch is a CPU-only build"):
        load(ModelOptions(model="random:tiny", device="cuda:0"), "target")
