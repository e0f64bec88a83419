"""The kernel time of a pass counts each kernel once: the kineto profiler reports a kernel's time on the
aten op that launched it and again as the kernel's own entry."""

from __future__ import annotations

import pytest
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

from tests.gpu.passes import device_ms


def launched(ids, name: str, start: int, op_us: int, kernel: str, kernel_us: int) -> list[FunctionEvent]:
    """An aten op on the CPU that launched one kernel, as the profiler lists them: the op, with the kernel
    appended (its device time), and the kernel as an entry of its own, on the device."""
    op = FunctionEvent(next(ids), name, thread=1, start_us=start, end_us=start + op_us, use_device="cuda",
                       stack=[])
    op.append_kernel(kernel, 0, kernel_us)
    entry = FunctionEvent(next(ids), kernel, thread=7, start_us=start + 2, end_us=start + 2 + kernel_us,
                          use_device="cuda", device_type=DeviceType.CUDA, stack=[])
    return [op, entry]


@pytest.fixture
def events():
    ids = iter(range(100))
    trace = [*launched(ids, "aten::mm", 0, 30, "gemm_kernel", 400),
             *launched(ids, "aten::mm", 50, 30, "gemm_kernel", 400),
             *launched(ids, "aten::softmax", 100, 20, "softmax_kernel", 100)]
    listed = EventList(trace, use_device="cuda")
    listed._build_tree()  # as the profiler does once its trace is parsed
    return listed.key_averages()


def test_each_kernel_counts_once(events):
    assert device_ms(events, on_cuda=True) == pytest.approx(0.9)  # 2 x 400 us + 100 us


def test_summing_every_entry_would_count_the_kernels_twice(events):
    """The fabricated trace has the profiler's shape: the naive sum is twice the kernel time."""
    assert sum(e.self_device_time_total for e in events) / 1e3 == pytest.approx(1.8)


def test_on_the_cpu_the_operators_self_time_counts(events):
    assert device_ms(events, on_cuda=False) == pytest.approx(sum(e.self_cpu_time_total for e in events) / 1e3)
