"""A run's machine and drafter in words: the CPU's model and count, a GPU's name, the drafter's spec, and what
the header lacks said as such."""

from __future__ import annotations

import pytest

from evaluation.machine import device_words, drafter_name, machine_line
from evaluation.provenance import vector_width

CPU = {"cpu": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu_count": 2, "gpus": []}


def header(target: dict, drafter: dict, environment: dict) -> dict:
    return {"models": {"target": target, "drafter": drafter}, "environment": environment}


def test_a_cpu_run_names_the_processor_its_cpus_and_the_drafters_spec():
    line = machine_line(header({"model": "smollm2", "device": "cpu"}, {"model": "smollm2:int8", "device": "cpu"},
                               CPU))
    assert line == "machine: Intel(R) Xeon(R) CPU @ 2.20GHz, 2 CPUs; target smollm2, drafter smollm2:int8"


def test_a_gpu_pair_names_each_device():
    environment = {**CPU, "gpus": ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]}
    line = machine_line(header({"model": "meta-llama/Llama-3.1-8B-Instruct", "device": "cuda:0"},
                               {"model": "eagle3:heads/llama", "device": "cuda:1"}, environment))
    assert line == ("machine: target on NVIDIA H200 (cuda:0), drafter on NVIDIA A100-SXM4-80GB (cuda:1); "
                    "target meta-llama/Llama-3.1-8B-Instruct, drafter eagle3:heads/llama")
    assert device_words(environment, "cuda") == "NVIDIA H200 (cuda)"


def test_what_the_header_lacks_is_said_unnamed():
    assert machine_line({}) == "machine: an unnamed CPU; target unnamed, drafter unnamed"
    assert device_words({}, "cuda:3") == "an unnamed GPU (cuda:3)"
    assert drafter_name({"models": {"drafter": "smollm2:int8"}}) == "smollm2:int8"


@pytest.mark.parametrize("flags, width", [("fpu avx avx2 fma avx512f avx512bw", "AVX-512"), ("fpu avx avx2 fma", "AVX2"),
                                          ("fpu avx", "AVX"), ("fpu sse2", None)])
def test_the_cpus_vector_width_is_read_from_its_flags(tmp_path, flags, width):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n")
    assert vector_width(str(info)) == width
    assert vector_width(str(tmp_path / "missing")) is None
    named = device_words({"cpu": "AMD EPYC", "cpu_vectors": width, "cpu_count": 2}, "cpu")
    assert named == (f"AMD EPYC ({width}), 2 CPUs" if width else "AMD EPYC, 2 CPUs")


def test_one_cpu_is_named_in_the_singular():
    assert device_words({"cpu": "AMD EPYC", "cpu_vectors": "AVX2", "cpu_count": 1}, "cpu") == "AMD EPYC (AVX2), 1 CPU"
