"""The Python API: `Pair` (launch.pair_api), a target and its drafter started once and decoding any prompt with
any decoder and settings; and beside it a vLLM-compatible layer (launch.vllm_compat), `LLM` and
`SamplingParams`, so that a script written for vLLM runs with its import line changed. docs/api.md has both.

    from launch.api import Pair                  # the runtime's own API
    from launch.api import LLM, SamplingParams   # vLLM's names

Importing this module starts nothing and changes nothing process-wide."""

from launch.pair_api import Pair, PairClosed, default_pool, settings, summarize
from launch.vllm_compat import LLM, CompletionOutput, Logprob, RequestMetrics, RequestOutput, SamplingParams

__all__ = ["LLM", "CompletionOutput", "Logprob", "Pair", "PairClosed", "RequestMetrics", "RequestOutput",
           "SamplingParams", "default_pool", "settings", "summarize"]
