"""The one walker of a result's JSON (analysis/json_form.py): fields in order, under their key,
left out when None or empty, through a form, flattened, internal ones not written."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.json_form import EMPTY, NONE, JsonForm, internal, member, to_json
from mismatchctl.render.json import dumps


@dataclass(frozen=True)
class Band:
    lo: float
    hi: float


@dataclass(frozen=True)
class Written:
    def to_dict(self) -> dict[str, str]:
        return {"by": "itself"}


@dataclass(frozen=True, kw_only=True)
class Step(JsonForm):
    step: int
    state: list[int] = internal()  # a mergeable state: never written
    edges: np.ndarray = member(form=lambda e: [float(x) for x in e])
    vllm_kl: float | None = member(key="vllm_kl_mean")
    band: str | None = member(omit=NONE, default=None)
    notes: list[str] = member(omit=EMPTY, default_factory=list)
    summary: dict[str, float] = member(flat=True)
    bounds: Band | None = member(flat=True, default=None)
    nested: Band = member()
    own: Written = member(default=Written())


def _step(**kw: object) -> Step:
    base: dict[str, object] = {
        "step": 3,
        "state": [1, 2],
        "edges": np.array([0.0, 0.5, 1.0]),
        "vllm_kl": 1.5e-3,
        "summary": {"p90": 2.0, "max": np.float64(4.0)},
        "nested": Band(0.25, 0.75),
    }
    return Step(**{**base, **kw})  # type: ignore[arg-type]


def test_fields_in_order_under_their_keys() -> None:
    out = _step().to_dict()
    assert list(out) == ["step", "edges", "vllm_kl_mean", "p90", "max", "nested", "own"]
    assert out["edges"] == [0.0, 0.5, 1.0] and type(out["edges"][1]) is float
    assert out["nested"] == {"lo": 0.25, "hi": 0.75}
    assert out["own"] == {"by": "itself"}  # a value with its own to_dict writes it
    assert "state" not in out  # internal


def test_omitted_when_none_or_empty_and_written_otherwise() -> None:
    out = _step(band="severe", notes=["a note"], bounds=Band(0.0, 1.0)).to_dict()
    assert out["band"] == "severe" and out["notes"] == ["a note"]
    assert (out["lo"], out["hi"]) == (0.0, 1.0)  # flat: in the result's own place
    assert list(out).index("band") == 3  # in its field's place
    none = _step(vllm_kl=None).to_dict()
    assert none["vllm_kl_mean"] is None  # no omit: None is written as null


def test_numpy_values_become_python_and_the_text_is_plain_json() -> None:
    out = to_json({"a": (np.int64(2), np.array([1, 2]))})
    assert out == {"a": [2, [1, 2]]} and type(out["a"][0]) is int
    text = dumps(_step().to_dict())
    assert json.loads(text)["max"] == 4.0


@dataclass(frozen=True)
class Rooted(JsonForm):
    JSON_ROOT = "show"

    run: str
    rows: list[dict[str, int]]


def test_a_root_key_holds_the_fields() -> None:
    out = Rooted("a", [{"position": np.int64(7)}]).to_dict()
    assert out == {"show": {"run": "a", "rows": [{"position": 7}]}}
    assert type(out["show"]["rows"][0]["position"]) is int


@dataclass(frozen=True)
class Formed(JsonForm):
    edges: tuple[float, ...] | None = member(form=lambda e: [2 * x for x in e], omit=NONE)
    kept: tuple[float, ...] | None = member(form=lambda e: list(e))


def test_a_form_is_not_given_none() -> None:
    assert Formed((1.0,), (2.0,)).to_dict() == {"edges": [2.0], "kept": [2.0]}
    assert Formed(None, None).to_dict() == {"kept": None}
