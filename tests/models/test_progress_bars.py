"""Loading a checkpoint hides transformers' progress bars while it loads, and leaves them as it found them."""

from __future__ import annotations

import pytest
import torch
from transformers.utils import logging as hf_logging

from models import load as load_module


@pytest.mark.parametrize("shown", [True, False])
def test_the_callers_progress_bar_setting_is_restored(monkeypatch, shown):
    during = []
    monkeypatch.setattr(load_module, "_load_hf_quietly",
                        lambda *args: during.append(hf_logging.is_progress_bar_enabled()) or ("model", "tok", "x"))
    before = hf_logging.is_progress_bar_enabled()
    try:
        (hf_logging.enable_progress_bar if shown else hf_logging.disable_progress_bar)()
        assert load_module._load_hf("some/model", torch.float32, False) == ("model", "tok", "x")
        assert during == [False] and hf_logging.is_progress_bar_enabled() is shown
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
