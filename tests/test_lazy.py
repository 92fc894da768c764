"""``lazy.load``: the PEP 562 ``__getattr__`` of the packages that re-export names on first use
(the package, ``stats``, ``analysis.diagnose``)."""

from __future__ import annotations

from typing import Any

import pytest

from mismatchctl import lazy

HOME = {"dedent": "textwrap"}


def test_a_name_is_loaded_from_its_module_and_bound_once() -> None:
    namespace: dict[str, Any] = {}
    from textwrap import dedent

    assert lazy.load("pkg", namespace, HOME, "dedent") is dedent
    assert namespace == {"dedent": dedent}  # later lookups find it without __getattr__


def test_a_name_without_a_home_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"module 'pkg' has no attribute 'nope'"):
        lazy.load("pkg", {}, HOME, "nope")


def test_the_packages_load_through_it() -> None:
    import mismatchctl
    import mismatchctl.stats as stats

    with pytest.raises(AttributeError, match=r"module 'mismatchctl.stats' has no attribute"):
        _ = stats.not_a_metric
    with pytest.raises(AttributeError, match=r"module 'mismatchctl' has no attribute"):
        _ = mismatchctl.not_a_verb
