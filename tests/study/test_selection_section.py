"""The selection section is made from the recorded rounds without changing what it was given: Table 8's emitted
tokens go to a copy of each temperature's values."""

from __future__ import annotations

import numpy as np

from study.selection_section import EMITTED, with_emitted
from study.values import RoundValues


def test_emitted_tokens_are_added_to_a_copy_of_the_values():
    values = {rule: np.full((3, 2), 0.5 + i) for i, rule in enumerate(EMITTED)}
    rv = RoundValues(temperature=0.0, budgets=np.array([8, 59]), prompt=np.zeros(3, np.int64), prompts=["p"],
                     categories=["qa"], values=values, mean_curves={}, off_pool=np.zeros(3))
    out = with_emitted(rv)
    assert rv.values is values and set(values) == set(EMITTED)  # what it was given is as it was
    for rule in EMITTED:
        np.testing.assert_array_equal(out.values[f"emitted:{rule}"], values[rule] + 1)
        assert out.values[rule] is values[rule]
