"""One weighed cause as the diagnosis writes it (the cause check's evidence lists them: the named
cause, the second causes, the runner-ups)."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import CheckEvidence, absent, renamed


@dataclass(frozen=True, kw_only=True)
class CauseRow(CheckEvidence):
    """A cause of the catalogue and its support on the run (``causes/hypothesis.Support``):
    its key, class and label, its checks' verdict, which form of it (``variant``) and where,
    the share of the excess it explains and its score, how much hotter its tokens are than the
    noise model's, the sentence with the numbers, the checks it read, the evidence against it;
    written for the named and the second causes: the next step and whether a correction would
    help (``correction``); for a runner-up: why it lost (``lost``)."""

    key: str
    cls: str = renamed("class")
    label: str
    verdict: str
    variant: str | None
    where: str | None
    share: float | None
    score: float
    rate_ratio: float | None
    rate_ratio_ci: tuple[float, float] | None
    because: str
    checks: list[str]
    against: list[str]
    next: str | None = absent()
    correction: str | None = absent()
    lost: str | None = absent()
