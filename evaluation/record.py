"""The one record of a decode, as every program writes it: the decode run's --json lines, sweep records
(which add where in the schedule the decode ran), the benchmarks, the GPU check and the Python API.

A record holds one turn of one prompt: the prompt's text (the context the decode continued, chat template
included) and token ids, the output (ids and text, at most `max_new_tokens` tokens), how it ended
(`finish_reason` "stop" at an end-of-sequence token, a stop token id or a stop string, "length" at the limit;
`stop_reason` the stop string or stop token id that matched, else None; `stop` which of the four, as
pipeline.result's FINISHES), how many tokens the last round produced beyond the limit, its time, per-round
columns (accept lengths with the bonus token, accepted tree nodes, depths tried, tree sizes, the budget each
round ran with (0: a plain round), phase times), and how busy the machine was: its load average over the
last minute as the decode started and as it ended (`load_average`), beside the CPUs the process may use
(`cpus`). Multi-turn prompts give one record per turn (target_proc.conversation decodes them in one
conversation with the decoder's own earlier answers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from pipeline.result import PHASES, DecodeResult
from pipeline.settings import DecodeConfig

SCHEMA = 4
# Schemas still read: 3 lacks `prompt_token_ids`, `load_average` and `cpus`; 2 also `prompt`,
# `finish_reason`, `stop_reason`, `stop_strings` and `stop_token_ids` (finish_reason() derives the reason from
# `stop`); 1, before the output limit was exact (no `schema` field), is refused.
READABLE = (2, 3, 4)


def machine_load() -> float:
    """The machine's load average over the last minute (runnable and waiting tasks, this process's own among
    them)."""
    return round(os.getloadavg()[0], 2)


def decode_record(result: DecodeResult, config: DecodeConfig, *, prompt_id: str, category: str, turn: int,
                  prompt_token_ids: Sequence[int], text: str, prompt: str = "", stop_reason: str | int | None = None,
                  load_average: tuple[float, float] = (0.0, 0.0)) -> dict:
    """The record of one decode; `load_average`: machine_load() as it started and as it ended."""
    rounds = result.rounds
    return {
        "kind": "decode", "schema": SCHEMA, "prompt_id": prompt_id, "category": category, "turn": turn,
        "decoder": config.decoder, "temperature": config.temperature, "top_k": config.top_k,
        "top_p": config.top_p, "min_p": config.min_p, "stop_strings": list(config.stop),
        "stop_token_ids": list(config.stop_token_ids), "budget": config.budget,
        "seed": config.seed, "max_new_tokens": config.max_new_tokens, "prompt": prompt,
        "prompt_tokens": len(prompt_token_ids), "prompt_token_ids": [int(t) for t in prompt_token_ids],
        "new_tokens": len(result.tokens), "token_ids": list(result.tokens), "text": text,
        "finish_reason": "length" if result.hit_limit else "stop", "stop_reason": stop_reason,
        "overshoot": result.overshoot, "stop": result.finish,
        "seconds": result.seconds, "prefill_seconds": result.prefill_seconds,
        "tokens_per_second": result.tokens_per_second, "rounds": len(rounds), "target_passes": result.target_passes,
        "accept_lengths": [r.emitted for r in rounds], "accepted": [r.accepted for r in rounds],
        "tried": [r.tried for r in rounds], "tree_sizes": [r.tree_size for r in rounds],
        "available": [r.available for r in rounds], "budgets": [r.budget for r in rounds],
        "phases": {name: [r.phases.seconds(name) for r in rounds] for name in PHASES},
        "lend_cores": config.lend_cores, "ahead": config.ahead, "ahead_hits": [r.ahead for r in rounds],  # per round: 1 hit, 0 missed, -1 not tried
        "ahead_seconds": [r.ahead_seconds for r in rounds],
        "cut_pools": config.cut_pools, "cut_weigh": config.cut_weigh, "pool_depths": [r.pool_depth for r in rounds],
        "drafter_window": config.drafter_window, "held_rows": [int(r.held_row) for r in rounds],
        "load_average": list(load_average), "cpus": len(os.sched_getaffinity(0)),
        "finished": time.time(),
    }


def finish_reason(record: dict) -> str:
    """A record's finish_reason, "stop" or "length", from schema 2's `stop` where it has none."""
    return record.get("finish_reason") or ("length" if record["stop"] == "limit" else "stop")
