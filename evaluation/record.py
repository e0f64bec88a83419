"""The one record of a decode, as every program writes it: the decode run's --json lines, sweep records
(which add where in the schedule the decode ran), the benchmarks, the GPU check and the Python API.

A record holds one turn of one prompt: the output (ids and text, at most `max_new_tokens` tokens), how
many tokens the last round produced beyond the limit, its time, and per-round columns (accept lengths
with the bonus token, accepted tree nodes, depths tried, tree sizes, the budget each round ran with (0: a
plain round), phase times). Multi-turn prompts give one record per turn (target_proc.conversation decodes
them in one conversation with the decoder's own earlier answers).
"""

from __future__ import annotations

import time

from pipeline.result import PHASES, DecodeResult
from pipeline.settings import DecodeConfig

SCHEMA = 2  # 1: records before the output limit was exact (no `schema` field)


def decode_record(result: DecodeResult, config: DecodeConfig, *, prompt_id: str, category: str, turn: int,
                  prompt_tokens: int, text: str) -> dict:
    rounds = result.rounds
    return {
        "kind": "decode", "schema": SCHEMA, "prompt_id": prompt_id, "category": category, "turn": turn,
        "decoder": config.decoder, "temperature": config.temperature, "top_k": config.top_k,
        "top_p": config.top_p, "min_p": config.min_p, "budget": config.budget,
        "seed": config.seed, "max_new_tokens": config.max_new_tokens, "prompt_tokens": prompt_tokens,
        "new_tokens": len(result.tokens), "token_ids": list(result.tokens), "text": text,
        "overshoot": result.overshoot, "stop": "limit" if result.hit_limit else "eos",
        "seconds": result.seconds, "prefill_seconds": result.prefill_seconds,
        "tokens_per_second": result.tokens_per_second, "rounds": len(rounds), "target_passes": result.target_passes,
        "accept_lengths": [r.emitted for r in rounds], "accepted": [r.accepted for r in rounds],
        "tried": [r.tried for r in rounds], "tree_sizes": [r.tree_size for r in rounds],
        "available": [r.available for r in rounds], "budgets": [r.budget for r in rounds],
        "phases": {name: [r.phases.get(name, 0.0) for r in rounds] for name in PHASES},
        "ahead": config.ahead, "ahead_hits": [r.ahead for r in rounds],  # per round: 1 hit, 0 missed, -1 not tried
        "ahead_seconds": [r.ahead_seconds for r in rounds],
        "finished": time.time(),
    }
