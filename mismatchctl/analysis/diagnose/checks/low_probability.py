"""KL concentrated in low-probability tokens: the "low-probability trap" of BACKGROUND.md."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mismatchctl.analysis.diagnose.advice import LOW_PROB_ADVICE
from mismatchctl.analysis.diagnose.check import (
    PATH,
    Check,
    CheckEvidence,
    advice_if,
    grade,
    renamed,
)
from mismatchctl.analysis.diagnose.context import CheckModule, Context
from mismatchctl.analysis.diagnose.levels import LOW_MAX, MEDIUM_MAX
from mismatchctl.analysis.diagnose.text import fmt, pct
from mismatchctl.analysis.report.report import Group
from mismatchctl.engines import plan as K
from mismatchctl.stats import bin_label
from mismatchctl.stats import registry as M

NAME = "low_probability"
LAYER = PATH
TITLE = "KL concentrated in low-probability tokens"
ORDER = 160
READS: tuple[CheckModule, ...] = ()


@dataclass(frozen=True)
class Thresholds:
    LOW_PROB: float = 1e-3
    """p_infer below this is a low-probability token (the report's ``low_prob_token_share``)."""

    LOWPROB_KL_SHARE: float = 0.25
    """The low-probability tokens hold at least a quarter of the K3 mass... (they are under 1%
    of the tokens: the sample data's captures put 1-7% of the mass there, a run whose trainer
    scores those tokens only 2x less likely than the engine 40%, which half the mass passed)"""

    LOWPROB_CONCENTRATION: float = 10.0
    """...and at least 10x their share of tokens: the "low-probability trap" of BACKGROUND.md.
    This one stays gated on the level (above ``LOW_MAX``): K3 always concentrates on unlikely
    tokens, and the trap is a matter of how much mass that is. (The cause names the rare
    tokens' excess over a baseline by this concentration too.)"""


T = Thresholds()


@dataclass(frozen=True, kw_only=True)
class Bin(CheckEvidence):
    """A low-probability bin's share of the tokens and of the K3 mass."""

    bin: str
    token_share: float | None = renamed(M.TOKEN_SHARE.key)
    kl_share: float | None = renamed(M.KL_SHARE.key)


@dataclass(frozen=True, kw_only=True)
class Evidence(CheckEvidence):
    """The tokens with p_infer below ``p_infer_below``: their share of the tokens and of the K3
    mass, the ratio of the two (``concentration``), the selection's vllm_kl, and each bin."""

    p_infer_below: float
    token_share: float = renamed(M.TOKEN_SHARE.key)
    kl_share: float = renamed(M.KL_SHARE.key)
    concentration: float | None
    vllm_kl: float | None = renamed(M.VLLM_KL.key)
    bins: list[Bin]


def run(ctx: Context) -> Check:
    edges = ctx.report.bin_edges
    low = [g for g in ctx.report.split(K.BIN) if edges[g.by[K.BIN] + 1] <= T.LOW_PROB]
    token_share = sum(g.metrics.get(M.TOKEN_SHARE) or 0.0 for g in low)
    kl_share = sum(g.metrics.get(M.KL_SHARE) or 0.0 for g in low)
    concentration = kl_share / token_share if token_share else None
    vk = ctx.vllm_kl
    evidence = Evidence(
        p_infer_below=T.LOW_PROB,
        token_share=token_share,
        kl_share=kl_share,
        concentration=concentration,
        vllm_kl=vk,
        bins=[_bin(edges, g) for g in low],
    )
    pattern = (
        concentration is not None
        and kl_share >= T.LOWPROB_KL_SHARE
        and concentration >= T.LOWPROB_CONCENTRATION
    )
    verdict = grade(pattern and (vk or 0) > MEDIUM_MAX, pattern and (vk or 0) > LOW_MAX)
    finding = (
        f"tokens with p_infer < {T.LOW_PROB:g} are {pct(token_share)} of tokens and hold "
        f"{pct(kl_share)} of the K3 mass (vllm_kl {fmt(vk)})"
    )
    return Check(
        LAYER, NAME, TITLE, verdict, finding, evidence,
        advice_if(verdict, LOW_PROB_ADVICE),
    )  # fmt: skip


def _bin(edges: np.ndarray, g: Group) -> Bin:
    m = g.metrics
    return Bin(
        bin=bin_label(edges, g.by[K.BIN]),
        token_share=m.get(M.TOKEN_SHARE),
        kl_share=m.get(M.KL_SHARE),
    )
