"""Every constant of the localization (``stats/localize/explain.py``), with the reasoning behind it.

docs/explain.md describes the algorithm these constants tune.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalizeThresholds:
    """Constants of ``explain``; change them only with a reason written here."""

    family_alpha: float = 0.05
    """Family-wise error rate of the localized findings: a cell is significant when the one-sided
    test of its specificity passes at ``family_alpha / m`` (Bonferroni over the ``m`` supported
    candidate cells of every table). Bonferroni ignores that nested cells are correlated, so the
    real family-wise rate is lower; the tests measure it on healthy-vs-healthy draws."""

    min_sequences: int = 30
    """Sequences a cell needs on each side to be tested. The sandwich variance has the number of
    sequences as its sample size and is biased low below a few dozen clusters (more so for
    heavy-tailed K3, whose mass sits on a few tokens): 30 keeps the bias small."""

    min_tokens: int = 200
    """Tokens a cell needs on each side to be tested (and the rest of the selection):
    below that a cell's K3 is a handful of tokens whatever the number of sequences."""

    max_token_share: float = 0.9
    """A finding holds at most this share of the selection's tokens: a cell covering nearly
    everything is compared with a sliver (a few sequences' worth, whose sandwich variance is
    least reliable), and an excess over 90% of the tokens is not localized anyway (the uniform
    dimensions and the overall rate ratio speak for it)."""

    min_effective_sequences: float = 10.0
    """A finding's K3 mass must be spread over at least this many sequences' worth
    (``A^2 / sum_i y_i^2``, the inverse Herfindahl index of its sequences' shares): K3 is
    heavy-tailed, and a cell whose mass is one sequence's few monster tokens is that sequence
    (``mismatchctl tokens`` shows it), not a localized cause; the delta method is also least
    reliable there."""

    lead_effective_sequences: float = 3.0
    """With no finding and a significant excess over the baseline (``explain``), the search runs
    again with this floor instead of ``min_effective_sequences``: its cells are *leads*, where
    the excess lives though a few sequences hold it (a fault some batch shapes take, hitting a
    few sequences of a step: the sample run ``faulty-attn``, 393x over 7.6 sequences' worth).
    Below three sequences' worth the cell is those sequences, which ``mismatchctl tokens
    --sequences`` names better than any cell."""

    min_baseline_sequences: float = 30.0
    """A baseline whose K3 mass is fewer sequences' worth than this (``A^2 / sum_i Y_i^2``
    over its sequences) cannot predict anything: its per-bin rates and its cells' contrasts
    are one monster sequence's. The target is then localized against itself (as without a
    baseline), and a note says so."""

    min_specificity: float = 1.25
    """A finding's rate must exceed its complement's (relative to the baseline) by at least this
    factor: significance alone would, on 100M tokens, report 5% differences no one acts on."""

    min_specific_share: float = 0.01
    """A finding must carry at least this share of the selection's K3 mass as *specific* excess
    (its mass above what the complement's rate predicts): localized faults of any absolute
    level qualify, a cell holding 0.1% of the mass does not."""

    rate_ci_level: float = 0.95
    """Level of the reported intervals (rate ratios, bootstrap)."""

    refine_alpha: float = 0.01
    """Parsimony (HotSpot's ripple effect): a finer cell replaces a coarser one only when it is
    significantly purer than the rest of the coarser cell, one-sided at ``refine_alpha / k``
    over the ``k`` finer cells examined; otherwise the coarser cell is reported."""

    min_refine_share: float = 0.05
    """A finer region replaces a finding only if what it leaves out holds at least this share of
    the finding's expected mass: dropping the 1% of tokens in the shortest sequences is no
    simpler explanation, whatever its significance on large data."""

    keep_alpha: float = 0.05
    """A value of a finding's range or set that is ``min_specificity`` times colder than the
    rest of the finding stays only if it is itself significantly hotter (one-sided at this
    level) than everything outside the finding: a range that took in healthy steps between two
    faulty ones gives them back, a weak cause spread over many values keeps them."""

    refine_keep: float = 0.8
    """Of the finer regions significantly purer than a finding, the purest one carrying at
    least this share of the largest specific excess among them replaces it: ``kv >= 1024``
    (all of a long-KV fault, nothing else) rather than ``kv >= 512`` (the fault diluted) or
    ``kv >= 2048`` (part of it)."""

    regime_values: int = 32
    """An ordered batch dimension (the step) with more values than this is searched as ranges
    and regimes: contiguous ranges (a change point, every step since one, an interval) and, when
    its values are not in blocks, every k-th value; its sets keep at most three ranges.
    Arbitrary sets of its values (the hottest half of hundreds of steps, each picked for its
    noise) are neither tried nor named. With fewer values every set of them is tried, as a
    fault can sit in any of a few batches (every third of 24 steps)."""

    max_period: int = 8
    """Periods tried for a regime dimension's every-k-th values (2 to this)."""

    merge_z: float = 1.96
    """Sibling findings (same dimensions, one value apart) merge into one finding with a set of
    values when their rate ratios differ by less than ``merge_z`` standard errors."""

    max_findings: int = 10
    """Findings reported (the greedy explain-away stops earlier when no cell passes)."""

    compare_overlap: float = 0.5
    """A dimension is compared between target and baseline when at least this share of the
    target's tokens have a value the baseline also has; otherwise (the run itself, the steps of
    an earlier-steps baseline, the gpu of a gpu-slice baseline) the baseline's rate is taken
    over all its values of that dimension."""

    uniform_alpha: float = 0.01
    """A dimension is uniform ("explains nothing") when Cochran's homogeneity test of its cells'
    log ratios does not reject at this level, or when the cells' spread is small (below)."""

    uniform_spread: float = 1.2
    """... or when the DerSimonian-Laird between-cell spread of the ratios is below this factor
    (on large data every dimension is heterogeneous at the 1% level by a few percent)."""

    uniform_precision: float = 2.0
    """Only cells whose ratio is known within this factor (95% half-width) enter the uniform
    test, and they must hold ``uniform_coverage`` of the tokens: a dimension is not called
    uniform for lack of data."""

    uniform_coverage: float = 0.8
    """Share of the target's tokens the precise cells of a uniform dimension must hold."""

    uniform_excess_share: float = 0.5
    """With a baseline, share of the excess over it the precise cells of a uniform dimension must
    hold: an excess a policy mismatch spreads over every token lies mostly where most tokens
    are; when the precise cells hold less than half of it (rare tokens' bins: 0.3% of the
    tokens, 80% of the excess), the dimension is not uniform and the excess not a policy's."""

    bootstrap_replicates: int = 200
    """Poisson-bootstrap replicates of the findings' intervals (percentiles)."""
