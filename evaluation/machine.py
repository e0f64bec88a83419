"""Which machine and drafter gave a run's figures, in words, from the run's provenance header: the default
run says them above its table and in its verdict, since speculation pays on one machine with one drafter and
loses on another with another. Pure: the header's dicts in, text out."""

from __future__ import annotations

import re


def device_words(environment: dict, device: str) -> str:
    """What ran on `device` ("cpu", "cuda:1", ...): the CPU's model, vector width and core count from `environment`
    (evaluation.provenance.environment), or the GPU's name; what the header lacks is said as unknown."""
    if device.startswith("cuda"):
        gpus = environment.get("gpus") or []
        index = int(m.group(1)) if (m := re.fullmatch(r"cuda(?::(\d+))?", device)) and m.group(1) else 0
        name = gpus[index] if index < len(gpus) else "an unnamed GPU"
        return f"{name} ({device})"
    if device == "cpu":
        cores, vectors = environment.get("cpu_count"), environment.get("cpu_vectors")
        return (f"{environment.get('cpu') or 'an unnamed CPU'}" + (f" ({vectors})" if vectors else "")
                + (f", {cores} CPU{'s' if cores != 1 else ''}" if cores else ""))
    return device


def machine_line(header: dict) -> str:
    """One line naming the machine, the target and the drafter of a run whose provenance is `header` ("models":
    each model's spec and device; "environment": the machine), e.g. "machine: AMD EPYC, 2 CPUs; target
    smollm2, drafter smollm2:int8"."""
    environment = header.get("environment") or {}
    models = header.get("models") or {}
    target, drafter = (models.get(side) if isinstance(models.get(side), dict) else {} for side in ("target", "drafter"))
    where = [target.get("device") or "cpu", drafter.get("device") or target.get("device") or "cpu"]
    machine = device_words(environment, where[0])
    if where[1] != where[0]:
        machine = f"target on {machine}, drafter on {device_words(environment, where[1])}"
    return (f"machine: {machine}; target {target.get('model') or 'unnamed'}, "
            f"drafter {drafter_name(header)}")


def drafter_name(header: dict) -> str:
    """The drafter's spec as the run gave it (`smollm2:int8`, `eagle3:PATH`, ...)."""
    drafter = (header.get("models") or {}).get("drafter")
    return (drafter.get("model") if isinstance(drafter, dict) else drafter) or "unnamed"
