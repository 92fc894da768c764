"""The ``spikes`` check (``analysis/diagnose/checks/spikes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.diagnose.stores import planted_causes, relative
from tests.planted import SPIKE_STEPS, diagnosis, spike_steps


@pytest.mark.parametrize("run", ["spike-small", "spike-loud"])
def test_spikes_are_found_in_a_six_step_run(relative_store: Path, run: str) -> None:
    checks = relative._checks(relative_store, run)
    spikes = checks["spikes"]
    assert spikes.verdict == ("warn" if run == "spike-small" else "fail")
    (evidence,) = spikes.evidence.runs.values()
    assert [int(s) for s in evidence.split.elevated_steps] == list(spike_steps(6))
    # every token of the spike steps scaled alike: hot throughout, no id moved on its own: the
    # engine's arithmetic at those steps, the code path of those steps (causes/step_change.py)
    assert checks["cause"].evidence.cause == "code_path"


def test_fires_on_its_planted_cause_only(verdicts: dict) -> None:
    planted_causes.fires_on_its_cause_only("spikes", verdicts)


def test_evidence_names_the_spike_steps(planted_store: Path) -> None:
    checks = {c.name: c for c in diagnosis(planted_store, "spike").checks}
    spikes = checks["spikes"].evidence.runs["spike"].split.elevated_steps
    assert sorted(int(s) for s in spikes) == sorted(SPIKE_STEPS)
