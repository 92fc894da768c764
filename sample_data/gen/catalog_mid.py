"""The same faults on a fourth model, generated after the corpus of the other three was
calibrated: ``tinylm-mid`` (5 layers of width 96, 3 heads of 32, seed 5), between the wide and
the deep models in depth and width. Its healthy runs are the false-alarm budget on a model the
thresholds never saw; its faults repeat the deep model's (every class at its subtle size and
the combinations of two) and a few loud ones (a temperature, a checkpoint behind, the
off-by-one split-KV merge, a chunked prefill's merge, an escaped template)."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_deep import COMBINED
from gen.catalog_models import healthy_shapes, repeated
from gen.catalog_wide import REPEATED

MODEL = "tinylm-mid"
LOUD = (
    "sem-temp-subtle",
    "pol-stale-ckpt",
    "cp-splitkv-loud",
    "cp-chunk-merge",
    "tpl-escaped-quotes",
)

MID: tuple[CalibRun, ...] = (
    *healthy_shapes(MODEL, "h-mid", "a 5-layer model of width 96 (seed 5)"),
    *(
        repeated(name, "mid", MODEL, "h-mid-a", "h-mid-gpus")
        for name in (*REPEATED, *COMBINED, *LOUD)
    ),
)
