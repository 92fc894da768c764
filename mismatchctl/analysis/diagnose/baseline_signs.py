"""The baseline's own sign coherence (``stats/sign_coherence.py``), read with its cube: how much
the known-good run's responses lean by their numerics alone at their length, against which
the ``policy_signs`` check judges a run of long responses (``checks/policy_signs.py``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.engines.keys import PartKeys
from mismatchctl.stats.hot_sequences import HotSequenceParts, hot_sequence_state
from mismatchctl.stats.sign_coherence import SignCoherence, sign_coherence


class BaselineSignsExtra:
    """Engine extra of the baseline's read: each run's per-sequence sign sums (the same
    ``hot_sequence_state`` the ``policy_signs`` check reads of the selection)."""

    columns: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def compute(self, table: pa.Table, keys: PartKeys) -> HotSequenceParts:
        lr, lt = keys.column(S.ROLLOUT), keys.column(S.TRAINER)
        r, k3 = keys.log_ratio()
        codes = np.asarray(keys.get(K.BIN).codes, dtype=np.int64)
        bins = np.broadcast_to(codes, (keys.n,)) if codes.ndim == 0 else codes
        return hot_sequence_state(
            lr,
            lt,
            keys.column(S.SEQ),
            keys.column(S.TURN),
            keys.column(S.STEP),
            bins,
            len(keys.edges) - 1,
            keys.run,
            k3=k3,
            r=r,
            starts=keys.sequence_starts(),
        )

    def merge(self, a: HotSequenceParts, b: HotSequenceParts) -> HotSequenceParts:
        return a.merge(b)


def baseline_signs(state: HotSequenceParts | None) -> SignCoherence | None:
    """The baseline's lean: of its runs, the one that leans most (None: no sequence tested)."""
    if state is None:
        return None
    found = [sign_coherence(s) for s in state.runs().values()]
    found = [f for f in found if f.tested]
    return max(found, key=lambda f: f.dispersion) if found else None
