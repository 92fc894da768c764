"""Readable names of sets of values (stats/value_names.py), and findings that use them: a step
set named by its structure in the sentence, every range kept in ``where``."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchctl.stats.cube.spec import Dim
from mismatchctl.stats.localize.explain import explain
from mismatchctl.stats.value_names import name_values, ordinal, runs
from tests.stats.localize.localize_data import Plan, pair

STEP = Dim("step", 200)
SOURCE = Dim("attr:source", 6, ("gsm8k", "math", "code", "search", "(none)", "(other)"), False)


@pytest.mark.parametrize(
    ("codes", "present", "want"),
    [
        ([40, 41, 42, 43, 44, 45, 46, 47], None, "40-47"),
        ([*range(150, 200)], None, "150-199"),
        ([2, 6, *range(10, 13)], None, "2,6,10-12"),  # three ranges: named one by one
        ([*range(1, 24, 3)], range(24), "1-22: 8 of 22, every 3rd"),
        (
            [19, 20, 21, 25, 26, 30, 31, 33, 34, 38, 39, 150, 151, 152, 199],
            range(200),
            "19-199: 15 of 181, in 7 short bursts (the longest 19-21)",
        ),
        ([*range(0, 10), *range(20, 30), *range(40, 50), *range(60, 62)], None,
         "0-61: 32 of 62, in 4 stretches (the longest 0-9)"),
    ],
)  # fmt: skip
def test_ordered_sets(codes: list[int], present: range | None, want: str) -> None:
    assert name_values(STEP, codes, present) == want


def test_the_denominator_counts_only_the_values_present() -> None:
    """Steps logged every 10: the codes are the present steps, a span of them."""
    steps = Dim("step", 50, tuple(str(10 * k) for k in range(50)))
    assert name_values(steps, [0, 2, 4, 6, 8], range(0, 50, 2)) == "0-80"  # all those present
    assert name_values(steps, [0, 2, 4, 6, 8]) == "0-80: 5 of 9, every 2nd"
    assert name_values(steps, [0, 2, 4, 6, 8, 12], range(0, 50, 2)) == "0-80,120"


def test_unordered_sets() -> None:
    assert name_values(SOURCE, [0, 2]) == "gsm8k,code"
    assert name_values(SOURCE, [0, 1, 2, 3, 5]) == "gsm8k,math,code and 2 more (5 of 6)"
    assert name_values(SOURCE, [0, 1, 2, 3, 5], [0, 1, 2, 3, 5]) == (
        "gsm8k,math,code and 2 more (5 of 5)"
    )


def test_runs_and_ordinals() -> None:
    assert runs([5, 1, 2, 3, 9]) == [(1, 3), (5, 5), (9, 9)]
    assert [ordinal(k) for k in (1, 2, 3, 4, 11, 12, 13, 21, 22, 102)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "102nd",
    ]  # fmt: skip


def test_a_finding_on_every_third_step_is_named_so_and_keeps_every_step() -> None:
    """A fault at KV >= 1024 in every third of 24 steps: ``where`` lists the steps (the JSON
    keeps them), the sentence and ``named`` say "every 3rd"."""
    steps = tuple(range(1, 24, 3))
    target, base = pair(
        Plan(cause="kv", magnitude=8.0, steps=24, seqs_per_step=64, fault_steps=steps, seed=4)
    )
    found = explain(target, base)
    top = found.findings[0]
    assert top.where["step"] == ",".join(str(s) for s in steps)
    assert top.named["step"].endswith("every 3rd") and "every 3rd" in top.sentence
    assert top.where["step"] not in top.sentence
    assert "named" in found.to_dict()["findings"][0]
    assert np.isfinite(top.rate_ratio)
