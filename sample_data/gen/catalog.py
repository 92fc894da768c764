"""The calibration corpus's runs, in generation order (healthy runs first: the baselines)."""

from __future__ import annotations

from gen.calib_spec import KINDS, SIZES, CalibRun
from gen.catalog_deep import DEEP
from gen.catalog_healthy import HEALTHY, IMPROVEMENTS
from gen.catalog_mid import MID
from gen.catalog_other import COMBOS, GROWTH, HARDWARE, ROUTING, TEMPLATE_STOP_DATA
from gen.catalog_pairs import PAIRS
from gen.catalog_paths import CODE_PATH, PRECISION
from gen.catalog_restart import RESTART
from gen.catalog_semantics import POLICY, SEMANTICS
from gen.catalog_trainer import TRAINER_BF16
from gen.catalog_unseen import UNSEEN
from gen.catalog_wide import WIDE

CATALOG: tuple[CalibRun, ...] = (
    *HEALTHY,
    *IMPROVEMENTS,
    *SEMANTICS,
    *POLICY,
    *CODE_PATH,
    *PRECISION,
    *HARDWARE,
    *TEMPLATE_STOP_DATA,
    *ROUTING,
    *GROWTH,
    *COMBOS,
    *WIDE,
    *DEEP,
    *UNSEEN,
    *MID,
    *PAIRS,
    *RESTART,
    *TRAINER_BF16,
)
BY_NAME: dict[str, CalibRun] = {run.name: run for run in CATALOG}


def check_catalog(runs: tuple[CalibRun, ...] = CATALOG) -> None:
    """Every name once; every baseline a healthy run of the same model with other rollouts."""
    names = {r.name for r in runs}
    assert len(names) == len(runs), "duplicate run names"
    for run in runs:
        base = BY_NAME.get(run.baseline)
        assert run.kind in KINDS and (run.size is None or run.size in SIZES), run.name
        assert base is not None and base.kind == "healthy", (run.name, run.baseline)
        assert base.model == run.model and base.long == run.long, (run.name, run.baseline)
        assert base.trainer_dtype == run.trainer_dtype, (run.name, run.baseline)
        assert base.rollout_key() != run.rollout_key(), f"{run.name}: same rollouts as baseline"
        assert (run.cause is None) == (run.kind in ("healthy", "improvement")), run.name
