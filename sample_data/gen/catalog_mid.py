"""The same faults on a fourth model, generated after the corpus of the other three was
calibrated: ``tinylm-mid`` (5 layers of width 96, 3 heads of 32, seed 5), between the wide and
the deep models in depth and width. Its healthy runs are the false-alarm budget on a model the
thresholds never saw; its faults repeat the deep model's (every class at its subtle size and
the combinations of two) and a few loud ones (a temperature, a checkpoint behind, the
off-by-one split-KV merge, a chunked prefill's merge, an escaped template)."""

from __future__ import annotations

from gen.calib_spec import CalibRun
from gen.catalog_deep import COMBINED
from gen.catalog_healthy import healthy
from gen.catalog_models import repeated, shaped
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
    healthy("h-mid-a", "h-mid-b", "a 5-layer model of width 96 (seed 5)", model=MODEL),
    healthy("h-mid-b", "h-mid-a", "as h-mid-a, loader b", model=MODEL, loader="b"),
    shaped("h-mid-t06", "t06", "h-mid-t06-b", MODEL, loader="c"),
    shaped("h-mid-t06-b", "t06", "h-mid-t06", MODEL, loader="b"),
    shaped("h-mid-t10", "t10", "h-mid-b", MODEL, loader="d"),
    shaped("h-mid-one-turn", "one-turn", "h-mid-one-turn-b", MODEL),
    shaped("h-mid-one-turn-b", "one-turn", "h-mid-one-turn", MODEL, loader="b"),
    shaped("h-mid-many-turns", "many-turns", "h-mid-many-turns-b", MODEL),
    shaped("h-mid-many-turns-b", "many-turns", "h-mid-many-turns", MODEL, loader="b"),
    shaped("h-mid-gpus", "gpus", "h-mid-a", MODEL, loader="e"),
    shaped("h-mid-waves", "waves", "h-mid-b", MODEL, loader="f"),
    *(
        repeated(name, "mid", MODEL, "h-mid-a", "h-mid-gpus")
        for name in (*REPEATED, *COMBINED, *LOUD)
    ),
)
