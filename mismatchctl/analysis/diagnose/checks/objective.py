"""Is an objective-side correction warranted, and would it help? The level and the severe
batches say whether one is needed, the cause whether fixing it is the better remedy, and the
suggested correction's what-if (seq-mis at C = 2) whether it keeps the signal."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

from mismatchctl.analysis.diagnose import corrections
from mismatchctl.analysis.diagnose.check import (
    DATA,
    FAIL,
    OBJECTIVE,
    OK,
    SEMANTIC,
    WARN,
    Check,
    CheckEvidence,
    Every,
    absent,
    evidence_of,
    renamed,
)
from mismatchctl.analysis.diagnose.checks import cause, severe_batches
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import LOW_MAX, MEDIUM_MAX
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.stats import registry as M

NAME = "objective"
LAYER = OBJECTIVE
TITLE = "Is a correction warranted?"
ORDER = 310
READS: tuple[CheckModule | Every, ...] = (Every(DATA), Every(SEMANTIC), severe_batches, cause)
"""Every check of the data and semantic layers (a correction would hide what fails there), the
severe batches and the cause."""


@dataclass(frozen=True)
class Thresholds:
    """None of its own: a correction is needed above ``MEDIUM_MAX`` or from severe_batches'
    ``SEVERE_FAIL_SHARE``, optional above ``LOW_MAX``; it keeps the signal by the limits it
    shares with whatif (``corrections``)."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The selection's vllm_kl, the largest share of a run's batches in the severe band, the
    suggested correction's what-if (seq-mis at C = 2: its metrics), the cause named, and
    ``correction_sane`` (not written when a data or semantic check fails): whether that
    correction keeps enough of the batch."""

    vllm_kl: float = renamed(M.VLLM_KL.key)
    severe_share_max: float
    seq_mis_2: dict[str, float | None] | None
    cause: str
    correction_sane: bool | None = absent()


def run(ctx: Context) -> Check:
    """Is an objective-side correction warranted, and would it help?"""
    severe = evidence_of(ctx.result(severe_batches), severe_batches.Evidence)
    shares = [e.severe_share for e in ((severe.runs or {}) if severe else {}).values()]
    severe_share = max(shares, default=0.0)
    vk = ctx.vllm_kl or 0.0
    found = cause.named(ctx)
    evidence = Evidence(
        vllm_kl=vk, severe_share_max=severe_share, seq_mis_2=ctx.seq_mis, cause=found
    )
    upstream = [c for c in ctx.results(DATA, SEMANTIC) if c.verdict == FAIL]
    if upstream:
        names = ", ".join(c.name for c in upstream)
        return Check(
            LAYER, NAME, TITLE, WARN,
            f"not yet: {names} failed; a correction would hide a data or semantic problem",
            evidence, "fix the data and semantic problems first, then diagnose again",
        )  # fmt: skip
    needed = vk > MEDIUM_MAX or severe_share >= severe_batches.T.SEVERE_FAIL_SHARE
    sane, why = _sane(ctx)
    evidence = dataclasses.replace(evidence, correction_sane=sane)
    fix = f"fix the cause ({found}, see the cause check)" if found in cause.FIXABLE else None
    if not needed:
        word = "optional" if vk > LOW_MAX else "not needed"
        finding = (
            f"{word}: vllm_kl {fmt(vk)}, at most {pct(severe_share)} of a run's batches severe"
        )
        if fix:
            finding += f"; {fix}: a correction would only reweight it"
        return Check(LAYER, NAME, TITLE, OK, finding, evidence, None)
    head = f"vllm_kl {fmt(vk)}, up to {pct(severe_share)} of a run's batches severe"
    if not sane:
        return Check(
            LAYER, NAME, TITLE, WARN,
            f"{head}, but a correction would discard the signal ({why})",
            evidence, (fix or "find the cause (`mismatchctl explain`)")
            + ": no correction keeps enough of the batch to learn from",
        )  # fmt: skip
    finding = f"yes: {head}{_seq_mis_text(ctx)}"
    advice = _advice(ctx, severe_share)
    if fix:
        finding = f"as a stopgap: {head}{_seq_mis_text(ctx)}"
        advice = f"{fix}; until then, {advice}"
    return Check(LAYER, NAME, TITLE, WARN, finding, evidence, advice)


def _sane(ctx: Context) -> tuple[bool, str]:
    """Whether seq-mis at C = 2 keeps enough of the batch (``corrections``)."""
    m = ctx.seq_mis
    if m is None:
        return True, ""
    ess, rejected = m.get(M.ESS), m.get(M.SEQUENCE_FRACTION)
    if ess is not None and ess < corrections.MIN_CORRECTION_ESS:
        return False, f"seq-mis at C = 2 leaves an ESS of {pct(ess)}"
    if rejected is not None and rejected > corrections.MAX_CORRECTION_REJECTED:
        return False, f"seq-mis at C = 2 rejects {pct(rejected)} of the sequences"
    return True, ""


def _seq_mis_text(ctx: Context) -> str:
    if ctx.seq_mis is None:
        return ""
    return (
        f"; seq-mis at C = 2 would reject {pct(ctx.seq_mis[M.SEQUENCE_FRACTION])} of the "
        f"sequences (ESS {pct(ctx.seq_mis[M.ESS])})"
    )


def _advice(ctx: Context, severe_share: float) -> str:
    label = shlex.quote(ctx.label)
    text = f"try `mismatchctl whatif {label} --method seq-mis --threshold 2`"
    if 0 < severe_share < severe_batches.T.SEVERE_FAIL_SHARE * 3:
        text += f", or a batch filter: `mismatchctl whatif {label} --method batch-filter:0.1`"
    return text
