"""The errors' shared checks: a value among its choices, or a UsageError naming both."""

from __future__ import annotations

import pytest

from mismatchctl.bisect.settings import check_start
from mismatchctl.errors import UsageError, one_of


def test_one_of_returns_a_known_value() -> None:
    assert one_of("bf16", ("fp32", "bf16"), "--start bf16", "pick one.") == "bf16"


def test_one_of_names_the_value_and_the_choices() -> None:
    with pytest.raises(UsageError) as caught:
        one_of("fp16", ("fp32", "bf16"), "--start fp16", "pick one.")
    assert caught.value.message == "--start fp16: expected one of fp32, bf16"
    assert caught.value.hint == "pick one."


def test_an_unknown_start_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^--start fp8: expected one of fp32, bf16"):
        check_start("fp8")
