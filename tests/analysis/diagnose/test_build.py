"""diagnose's reads (``analysis/diagnose/build.py``): the baseline's cube and, when it has MoE
routes, its routing metrics from the same read, as the report computes them for that run."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl.analysis.diagnose.build import EDGES, _baseline_read
from mismatchctl.analysis.explain import cube_spec
from mismatchctl.analysis.report.report import report_on
from mismatchctl.analysis.selection import resolve_text
from mismatchctl.engines.choice import LOCAL_ENGINE
from mismatchctl.stats import routing_sums as R
from mismatchctl.stats.tail_excess import tail_excess
from mismatchctl.store import open_store
from tests.planted import diagnosis


def test_a_routed_baselines_routing_is_read_with_its_cube(calibration_store: Path) -> None:
    """The tokens before any flip of a healthy MoE baseline (the precision beside routing flips
    is read against them): the report's figure for the run; a dense baseline has none."""
    store = open_store(calibration_store)
    moe = resolve_text(store, "h-moe-a")
    cube, _, routing, _ = _baseline_read(
        moe, cube_spec([moe], EDGES, with_run=False), 1, LOCAL_ENGINE
    )
    assert cube.tokens > 0 and routing is not None
    expected = report_on(moe).routing["h-moe-a"].metrics[R.VLLM_KL_BEFORE_FLIP]
    assert routing[R.VLLM_KL_BEFORE_FLIP] == pytest.approx(expected, rel=1e-12)
    dense = resolve_text(store, "h-a")
    cube, _, routing, _ = _baseline_read(
        dense, cube_spec([dense], EDGES, with_run=False), 1, LOCAL_ENGINE
    )
    assert cube.tokens > 0 and routing is None


def test_a_baselines_signs_are_read_with_its_cube(calibration_store: Path) -> None:
    """The baseline's own sign coherence (``baseline_signs.py``), read with its cube, is the one
    the ``policy_signs`` check measures of the same run diagnosed."""
    store = open_store(calibration_store)
    base = resolve_text(store, "h-a")
    spec = cube_spec([base], EDGES, with_run=False)
    cube, signs, _, sequences = _baseline_read(base, spec, 1, LOCAL_ENGINE)
    found = diagnosis(calibration_store, "h-a").section_dict()
    own = next(c for c in found["checks"] if c["name"] == "policy_signs")["evidence"]
    assert signs is not None and signs.tested == own["tested"] > 0
    assert signs.dispersion == pytest.approx(own["dispersion"], rel=1e-12)
    assert signs.p_value == pytest.approx(own["p_value"], rel=1e-9)
    # its per-sequence sums, kept for the tail beside a truncation: every token, once
    assert sequences is not None and sequences.sums[:, 0].sum() == cube.tokens
    itself = tail_excess(sequences, sequences)
    assert itself is not None and itself.ratio == pytest.approx(1.0, rel=1e-12)


def test_the_runs_cube_tables_are_made_once_for_every_check(
    one_gpu_each_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's view (steps, localization), the checks' contrasts, the gpus compared with the
    baseline's and the localization against the baseline read one set of the run's cube's
    search tables; the diagnosis is the one of tables made for each."""
    from mismatchctl import api
    from mismatchctl.stats.localize import tables

    def checks() -> list[dict]:
        found = api.diagnose("a100-3x", store=one_gpu_each_store, baseline="base-h20")
        return [c.to_dict() for c in found.checks]

    made: list[int] = []
    init = tables.SideTables.__init__

    def counted(self: tables.SideTables, cube: object) -> None:
        made.append(id(cube))
        init(self, cube)  # type: ignore[arg-type]

    monkeypatch.setattr(tables.SideTables, "__init__", counted)
    shared = checks()
    run_cube = made[0]  # the run's view makes the first
    assert made.count(run_cube) == 1 and len(made) >= 2  # and the baseline's cube its own
    monkeypatch.setattr(
        "mismatchctl.analysis.diagnose.context.Context.tables", property(lambda self: None)
    )
    assert checks() == shared  # each contrast making its own tables: the same diagnosis
