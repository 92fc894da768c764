"""Identical token ids on both sides: not checkable after ingest (the store keeps one id column);
listed so that the diagnosis says so."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.check import DATA, NA, Check, CheckEvidence
from mismatchctl.analysis.diagnose.context import CheckModule, Context

NAME = "token_ids"
LAYER = DATA
TITLE = "Identical token ids on both sides"
ORDER = 20
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    """None: the check is n/a on a store."""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """Nothing measured (the JSON's ``{}``): the store keeps one id column."""


def run(ctx: Context) -> Check:
    return Check(
        LAYER,
        NAME,
        TITLE,
        NA,
        "the store keeps one token id column per token, so ids of the two sides cannot be "
        "compared after ingest",
        Evidence(),
        "when the dumps carry both sides' ids, compare them before ingest",
    )
