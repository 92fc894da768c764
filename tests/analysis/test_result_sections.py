"""A result's sections come from its view through ``analysis/result_sections.py`` (the api's and
the package's ``sections``): every result the command line shows has one, found by its type."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.analysis import result_sections
from mismatchctl.analysis import sections as sec
from mismatchctl.analysis.whatif.preset import PresetList, list_presets


@pytest.mark.parametrize("key", sorted(result_sections.VIEWS), ids=lambda k: k[1])
def test_every_view_is_keyed_by_a_result_type(key: tuple[str, str]) -> None:
    """A key names a class of its module: a result renamed or moved fails here, not in a
    command."""
    module, name = key
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls, type) and cls.__qualname__ == name
    assert hasattr(cls, "to_dict")
    assert not hasattr(cls, "sections")  # a result does not know its view


@pytest.mark.parametrize("key", sorted(result_sections.VIEWS), ids=lambda k: k[1])
def test_every_view_names_a_function_of_its_module(key: tuple[str, str]) -> None:
    """A view is named by module and function (imported when shown): a view renamed or moved
    fails here, and so does a ``takes`` that is no field of ``Shown``."""
    view = result_sections.VIEWS[key]
    assert callable(getattr(importlib.import_module(view.module), view.function))
    fields = {f.name for f in dataclasses.fields(result_sections.Shown)}
    assert view.takes is None or view.takes in fields


def test_a_result_is_shown_by_its_view() -> None:
    listed = list_presets()
    shown = api.sections(listed)
    assert [s.id for s in shown] == [f"preset-{p.name}" for p in listed.presets]
    assert all(isinstance(s, sec.Lines) for s in shown)
    assert mismatchctl.sections(listed) == shown  # the package's name is the api's


def test_a_subclass_of_a_result_is_shown_by_the_result_s_view() -> None:
    @dataclasses.dataclass(frozen=True)
    class Listed(PresetList):
        pass

    listed = list_presets()
    assert api.sections(Listed(listed.presets)) == api.sections(listed)


def test_a_value_without_a_view_is_refused() -> None:
    with pytest.raises(TypeError, match=r"no view shows a dict: the results with one are .*Report"):
        api.sections({"vllm_kl": 0.0})
