"""A pair without a drafter: the target alone, no drafter process and so one model's memory, as vLLM's `LLM(model)`
is; and budget auto's one-time pass timing kept out of the API's progress's time left."""

from __future__ import annotations

import pytest

import launch.pair_api
import launch.vllm_compat
from launch.api import LLM, Pair, SamplingParams
from models.mock import MockModel
from models.tokenizers import MockTokenizer
from pipeline.config import ConfigError, InputError
from pipeline.settings import DecodeConfig
from programs.progress import Progress


@pytest.mark.parametrize("target_process", [False, True])
def test_a_pair_without_a_drafter_starts_no_drafter_process(target_process, greedy):
    with Pair("mock", drafter=False, target_process=target_process) as pair:
        assert len(pair._children.procs) == int(target_process)  # the target's own process at most
        assert "drafter" not in pair.models and pair.drafter_options is None
        out = pair.decode("a b c", decoder="ar", max_new_tokens=8)
        assert out.token_ids == greedy(MockModel(64, 0), MockTokenizer(64).prompt_ids("a b c"), 8)
        assert set(out.metrics.tree_sizes) == {0}
        with pytest.raises(ConfigError, match="^`decoder` 'draft' needs a drafter, and this pair has none"):
            pair.decode("a b c", decoder="draft")
    with pytest.raises(ConfigError, match="^`drafter_options` are a drafter's, and `drafter=False` starts none"):
        Pair("mock", drafter=False, drafter_options={"dtype": "float32"})


def test_llm_without_a_drafter_starts_none():
    with LLM("mock") as plain:
        assert plain.pair._children.procs == [] and plain.pair.drafter_options is None
        (out,) = plain.generate("a b", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
        assert out.metrics.decoder == "ar" and len(out.outputs[0].token_ids) == 4
    with pytest.raises(ConfigError, match="^`decoder` 'root-draw' needs a drafter: name one with `drafter`"):
        LLM("mock", decoder="root-draw")


class Recorded(Progress):
    """A Progress that notes where budget auto's timing ran: inside `aside`, before the first decode's step."""

    events: list = []

    @classmethod
    def watching(cls, target) -> None:
        timings = target.timings
        target.timings = lambda caps: (cls.events.append(("timings", caps)), timings(caps))[1]

    def aside(self):
        Recorded.events.append("aside")
        return super().aside()

    def step(self, note: str = "") -> str:
        Recorded.events.append("step")
        return super().step(note)


def test_budget_autos_pass_timing_is_kept_out_of_the_bars_time_left(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPAIR_KERNEL_CACHE", str(tmp_path / "linear-kernels.json"))  # timed here, not kept
    for module in (launch.pair_api, launch.vllm_compat):
        monkeypatch.setattr(module, "Progress", Recorded)
    auto = {"decoder": "draft", "budget": "auto", "budget_max": 8}
    with LLM("mock", drafter="mock", target_process=True) as llm:
        Recorded.watching(llm.pair._target)
        Recorded.events = []
        llm.pair.decode(["a b", "c d"], max_new_tokens=3, use_tqdm=False, **auto)
        assert Recorded.events == ["aside", ("timings", [8]), "step", "step"]
        Recorded.events = []
        llm.generate(["a b", "c d"], SamplingParams(max_tokens=3), use_tqdm=False, **auto)
        assert Recorded.events == ["aside", ("timings", [8]), "step", "step"]
        Recorded.events = []
        llm.generate(["a b", "c d"], SamplingParams(max_tokens=3), use_tqdm=False, decoder="ar")
        assert Recorded.events == ["aside", "step", "step"]  # nothing to time
        with pytest.raises(InputError, match=r"`timings` must be a list of whole numbers > 0 \(budget caps\), got"):
            llm.pair._target.timings([0])
        llm.pair.time_passes([DecodeConfig("draft", budget="auto", budget_max=16)])  # the process serves on
        assert Recorded.events[-1] == ("timings", [16])
