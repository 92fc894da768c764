"""What a cause is (``CauseModule``) and what it finds on a run (``Support``), on one scale.

The currency is the **share of the excess** a cause explains: the K3 mass of the tokens it claims
above what the noise model predicts for them, over the run's K3 mass (over its excess over a
``--baseline`` when one is given). The noise model is the run's own rate at the same token
probabilities in the tokens the cause does not claim (a region against the rest, ``stats/
localize``), or the baseline's. A cause of a part of the run with rate ratio ``rho`` whose tokens
carry a share ``m`` of the mass explains ``m (1 - 1/rho)``: a cause that claims much and is
little hotter explains little. A cause of every token (the policy, the logprob semantics, the
precision) has no rest to compare with: it is recognised by the shape of ``r`` (whole responses
leaning one way, a slope against the logprob, a deficit of the mean ratio) and explains what the
parts of the run do not, or the share its own measure gives it where that is more
(``Support.least``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from mismatchctl.analysis.diagnose.check import FAIL, OK, WARN, Check
from mismatchctl.analysis.diagnose.context import CheckModule

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.context import Context

ALARMS = (WARN, FAIL)


@dataclass(frozen=True)
class Support:
    """One cause on one run. ``verdict``: its checks' (ok: not seen); ``share``: of the excess it
    explains (0-1; None for a cause of every token until the weighing gives it what the parts do
    not explain); ``ratio`` and ``ci``: how much hotter its tokens are than the noise model's;
    ``claim``: the share of the tokens it claims, where known (1: every token); ``where``: the part of the run
    it names; ``because``: the sentence with the numbers; ``checks``: the checks it read;
    ``against``: evidence that contradicts it, each sentence lowering its score; ``variant``:
    which form of the cause (``top-p``, ``stale weights``...); ``region``: the part of the run
    it names as the cube's codes (dimension -> search-level codes), where it is one: the second
    pass tests the causes of every token outside it (``outside.py``); ``least``: for a cause of
    every token, the share its own measure says it explains at the least, whatever the parts of
    the run claim (a temperature's line: the share of ``r``'s variance it explains)."""

    verdict: str
    share: float | None
    because: str
    checks: tuple[str, ...]
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    claim: float | None = None
    where: str = ""
    variant: str = ""
    against: tuple[str, ...] = ()
    region: dict[str, list[int]] | None = None
    least: float | None = None

    @property
    def alarm(self) -> bool:
        return self.verdict in ALARMS


class CauseModule(Protocol):
    """A module of ``causes/``. ``KEY``: the cause (the JSON's ``cause.key``); ``CLASS``: its
    class in the catalogue (docs/diagnose.md); ``LABEL``: what the user reads; ``SIGNATURE``: the
    tokens it predicts hot and the shape of ``r`` there; ``TELLS_APART``: the causes it can be
    mistaken for and what tells them apart; ``EVERY_TOKEN``: a cause of every token (its share is
    what the parts of the run do not explain); ``EXPLAINS``: the causes whose checks its own
    fault also sets off (their alarm is no second cause beside it); ``CORRECTION``: whether an
    objective-side correction (importance sampling, routing replay) would help; ``READS``: the
    checks ``support`` reads; ``advice``: the next step. Optional: ``OUTSIDE_ONLY`` (a cause
    whose evidence is a level: beside a part it is tested only outside it) and ``WITHIN`` (the
    causes whose part holds this one's tokens: beside it they count what is left without them)
    and ``beside`` (given the keys of the causes that alarm, whether any second cause may be
    named beside this one: ``routing_capture``'s misaligned replay sets off every alarm of the
    logprobs) (``weigh.py``)."""

    KEY: str
    CLASS: str
    LABEL: str
    SIGNATURE: str
    TELLS_APART: str
    EVERY_TOKEN: bool
    EXPLAINS: tuple[str, ...]
    CORRECTION: str
    READS: tuple[CheckModule, ...]
    support: Callable[[Context], Support | None]
    advice: Callable[[Context, Support], str]


@dataclass(frozen=True)
class Weighed:
    """A cause and its support, scored: ``score`` is the share of the excess explained, lowered
    by half for each piece of evidence against it (``AGAINST``)."""

    cause: CauseModule
    support: Support
    score: float
    lost: str = ""  # why it is not the named cause (runner-ups)
    notes: list[str] = field(default_factory=list)


QUIET = "its checks did not fire"
"""Why a runner-up lost when nothing more is to be said of it (the view leaves such a one out)."""

AGAINST = 0.5
"""Each piece of evidence that contradicts a cause halves its score (a 1.6x edge effect cannot
outrank a policy signal that explains the whole excess; a routing flip that carries no more
mismatch than the other tokens is no routing cause)."""


def part_share(mass_share: float | None, ratio: float | None) -> float | None:
    """The share of the run's mass a part explains: the part's share ``m`` of the K3 mass above
    what the rest's rate at the same token probabilities predicts, ``m (1 - 1/rho)``; 0 for a
    part no hotter than the rest."""
    if mass_share is None or ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    if not math.isfinite(mass_share):
        return None
    return max(0.0, min(1.0, mass_share * (1.0 - 1.0 / ratio)))


def worst_of(checks: list[Check | None]) -> str:
    """The worst verdict of these checks (ok when none ran)."""
    order = {OK: 0, WARN: 1, FAIL: 2}
    found = [c.verdict for c in checks if c is not None and c.verdict in order]
    return max(found, key=order.__getitem__, default=OK)
