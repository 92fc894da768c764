"""Every number mismatchctl reports, named once: its JSON key, its column header, how it is
formatted, its unit and what it means.

A :class:`Metric` *is* its JSON key (a ``str``), so results are keyed by these constants and
written as plain JSON, while every writer finds the header, the format and the description here.
No other module spells a metric name (``tests/test_registry.py`` checks it), and the tables of
docs/metrics.md are generated from this module (``docs_tables``).
"""

from __future__ import annotations

from enum import StrEnum


class Fmt(StrEnum):
    """How a value is written."""

    COUNT = "count"  # an integer, with thousands separators
    VALUE = "value"  # 4 significant digits, scientific when small or large
    CORR = "corr"  # a correlation: 6 significant digits (they sit near 1)
    SHARE = "share"  # a fraction, written as a percentage
    RATIO = "ratio"  # a ratio of two values of one metric


class Level(StrEnum):
    """What a metric is a mean over (docs/metrics.md, "Notation")."""

    COUNT = "count"  # a count of the group
    TOKEN = "token"  # a mean (or extreme) over the group's model tokens
    SEQUENCE = "sequence"  # a mean over the group's sequences (segments)
    BIN = "bin"  # a share of a probability bin within its parent group
    STEP = "step"  # a statistic of the per-step (batch) values of a group
    CORRECTION = "correction"  # a statistic of a correction's weights (whatif)
    CURVE = "curve"  # a per-step curve derived from the dumps


class Metric(str):
    """A metric name (the JSON key) with what the writers need to show it."""

    header: str
    fmt: Fmt
    level: Level
    unit: str
    description: str

    def __new__(
        cls,
        key: str,
        description: str,
        *,
        header: str | None = None,
        fmt: Fmt = Fmt.VALUE,
        level: Level = Level.TOKEN,
        unit: str = "",
    ) -> Metric:
        self = super().__new__(cls, key)
        self.header, self.fmt, self.level = header or key, fmt, level
        self.unit, self.description = unit, description
        return self

    def __reduce__(self) -> tuple:  # pickles (Ray tasks, worker processes) as the registry's own
        return (by_key, (str(self),))

    @property
    def key(self) -> str:
        return str(self)


ALL: list[Metric] = []


def _m(key: str, description: str, **kw: object) -> Metric:
    metric = Metric(key, description, **kw)  # type: ignore[arg-type]
    ALL.append(metric)
    return metric


C, T, Q, B, P, W, V = (
    Level.COUNT,
    Level.TOKEN,
    Level.SEQUENCE,
    Level.BIN,
    Level.STEP,
    Level.CORRECTION,
    Level.CURVE,
)

# --- counts -------------------------------------------------------------------------------
TOKENS = _m("tokens", "model tokens of the group", fmt=Fmt.COUNT, level=C)
SEQUENCES = _m(
    "sequences",
    "sequences (segments) with at least one model token",
    header="seqs",
    fmt=Fmt.COUNT,
    level=C,
)
OVERFLOW_TOKENS = _m(
    "overflow_tokens",
    "tokens whose r is beyond float64's exp (r > 709.78)",
    header="overflow",
    fmt=Fmt.COUNT,
    level=C,
)

# --- token metrics (mean over the group's model tokens) ------------------------------------
VLLM_KL = _m(
    "vllm_kl",
    "mean of rho - 1 - r: the K3 estimator of KL(pi_infer || pi_train); not clamped",
    unit="nats",
)
KL_K1 = _m("kl_k1", "mean of -r: signed, unbiased, can be negative", unit="nats")
KL_K2 = _m("kl_k2", "mean of r^2 / 2", unit="nats")
LOG_RATIO_MEAN = _m(
    "log_ratio_mean",
    "mean of r: a clear non-zero value hints at a semantic mismatch",
    header="mean r",
)
LOG_RATIO_STD = _m("log_ratio_std", "population standard deviation of r", header="std r")
ABS_LOG_RATIO_MEAN = _m(
    "abs_log_ratio_mean", "mean of |r|: the mean |Δ logprob|", header="|r| mean"
)
ABS_LOG_RATIO_MAX = _m("abs_log_ratio_max", "max of |r|", header="|r| max")
CHI2_TOKEN = _m("chi2_token", "mean of exp(2 clamp(r, -20, 20)) minus 1")
RATIO_DEV_1E4 = _m("ratio_dev_1e4", "(mean of rho - 1) x 10,000: the policy-ratio deviation from 1")
PROB_ABS_DIFF_MEAN = _m(
    "prob_abs_diff_mean", "mean of |pt - pr| (probability space)", header="|Δp| mean"
)
PROB_ABS_DIFF_MAX = _m("prob_abs_diff_max", "max of |pt - pr|", header="|Δp| max")
PROB_PEARSON = _m(
    "prob_pearson",
    "Pearson correlation of pr and pt over the tokens",
    header="prob ρ",
    fmt=Fmt.CORR,
)
ROLLOUT_PROB_MEAN = _m(
    "rollout_prob_mean",
    "mean of p_infer = exp(rollout logprob): how confident the inference engine was",
    header="p_infer mean",
)
VLLM_KL_CLAMPED = _m(
    "vllm_kl_clamped",
    "mean of K3 of clamp(r, -c, c), c = 10 unless --clamp says otherwise (slime/miles "
    "train_rollout_kl)",
    header="vllm_kl clamped",
    unit="nats",
)
EXTREME_FRAC_TAU2 = _m(
    "extreme_frac_tau2",
    "share of tokens with |r| > ln(tau), tau = 2 (AReaL rollout_train_extreme_frac_tau2); "
    "--tau T names it extreme_frac_tauT",
    header="extreme τ2",
    fmt=Fmt.SHARE,
)
IS_OOB_RATIO = _m(
    "is_oob_ratio",
    "share of tokens whose ratio exp(r) is outside [lower, upper], 0.5 and 2 unless --is-bounds "
    "says otherwise (verl rollout_corr/rollout_is_oob_ratio; the bounds are in the JSON)",
    header="IS oob",
    fmt=Fmt.SHARE,
)
PROB_DIFF_MEAN = _m(
    "prob_diff_mean",
    "mean of pt - pr: signed probability difference (ROLL train_infer_diff_mean, per token)",
    header="Δp mean",
)
VLLM_KL_SEQ_MEAN = _m(
    "vllm_kl_seq_mean",
    "mean over sequences (segments) of their mean K3: sequence-weighted K3 (slime's convention)",
    level=Q,
    unit="nats",
)

# --- sequence metrics (per sequence or segment, then the mean over them) --------------------
ROLLOUT_LOG_PPL = _m("rollout_log_ppl", "mean of -(mean rollout logprob of the sequence)", level=Q)
TRAINER_LOG_PPL = _m("trainer_log_ppl", "mean of -(mean trainer logprob of the sequence)", level=Q)
ROLLOUT_PPL = _m("rollout_ppl", "mean of exp(rollout log-ppl of the sequence)", level=Q)
TRAINER_PPL = _m(
    "trainer_ppl",
    "mean of exp(trainer log-ppl of the sequence): the fsdp-ppl of the studies",
    level=Q,
)
LOG_PPL_DIFF = _m(
    "log_ppl_diff",
    "mean of trainer minus rollout log-ppl (positive: the trainer is less confident)",
    level=Q,
)
LOG_PPL_ABS_DIFF = _m("log_ppl_abs_diff", "mean of |trainer minus rollout log-ppl|", level=Q)
PPL_RATIO = _m("ppl_ratio", "mean of exp(trainer minus rollout log-ppl)", level=Q)
LOG_PPL_PEARSON = _m(
    "log_ppl_pearson",
    "Pearson correlation across sequences (segments) of the two log-ppls",
    header="log-ppl ρ",
    fmt=Fmt.CORR,
    level=Q,
)
CHI2_SEQ = _m(
    "chi2_seq", "mean of exp(2 clamp(sum of r over the sequence, -20, 20)) minus 1", level=Q
)
RATIO_SEGMENT_MEAN = _m(
    "ratio_segment_mean",
    "mean over sequences (segments) of the token mean of each token's turn ratio exp(mean r "
    "over its turn) (ROLL train_infer_ratio_segment_mean)",
    header="ratio seg mean",
    level=Q,
)

# --- probability bins --------------------------------------------------------------------
LOG_RATIO_P01 = _m(
    "log_ratio_p01", "1st percentile of r (mergeable histogram, within 1% of |r|)", header="p01 r"
)
LOG_RATIO_P50 = _m(
    "log_ratio_p50", "median of r (mergeable histogram, within 1% of |r|)", header="p50 r"
)
LOG_RATIO_P99 = _m(
    "log_ratio_p99", "99th percentile of r (mergeable histogram, within 1% of |r|)", header="p99 r"
)
TOKEN_SHARE = _m(
    "token_share",
    "the bin's tokens / the parent group's tokens",
    header="token share",
    fmt=Fmt.SHARE,
    level=B,
)
KL_SHARE = _m(
    "kl_share",
    "the bin's sum of K3 / the parent group's sum of K3: which tokens drive the KL",
    header="kl share",
    fmt=Fmt.SHARE,
    level=B,
)

# --- per-step (batch) series of a group (hardware table) -----------------------------------
BATCHES = _m("batches", "batches (one step of one run) of the group", fmt=Fmt.COUNT, level=P)
VLLM_KL_STEP_MEDIAN = _m(
    "vllm_kl_step_median", "median of the per-batch vllm_kl", header="median", level=P
)
VLLM_KL_STEP_P90 = _m(
    "vllm_kl_step_p90",
    "90th percentile (numpy linear) of the per-batch vllm_kl",
    header="p90",
    level=P,
)
VLLM_KL_STEP_MAX = _m("vllm_kl_step_max", "max of the per-batch vllm_kl", header="max", level=P)
BAND_SHARE = {
    band: _m(
        f"band_share_{band}",
        f"share of batches in the {band} band",
        header=band,
        fmt=Fmt.SHARE,
        level=P,
    )
    for band in ("low", "medium", "high", "severe")
}
LATER_FIRST_VLLM_KL_RATIO = _m(
    "later_first_vllm_kl_ratio",
    "vllm_kl of later turns / vllm_kl of first turns",
    header="later/first",
    fmt=Fmt.RATIO,
    level=P,
)
LOW_PROB_TOKEN_SHARE = _m(
    "low_prob_token_share",
    "share of tokens with p_infer < 1e-3",
    header="p<1e-3",
    fmt=Fmt.SHARE,
    level=P,
)

# --- corrections (whatif) ------------------------------------------------------------------
UNITS = _m(
    "units", "units the correction weighs (tokens, or sequences / segments)", fmt=Fmt.COUNT, level=W
)
TOKEN_FRACTION = _m(
    "token_fraction",
    "share of tokens clipped or rejected",
    header="tokens hit",
    fmt=Fmt.SHARE,
    level=W,
)
SEQUENCE_FRACTION = _m(
    "sequence_fraction",
    "share of sequences clipped or rejected (for token methods: with a token hit)",
    header="seqs hit",
    fmt=Fmt.SHARE,
    level=W,
)
RAW_MEAN = _m("raw_mean", "mean of the raw (untruncated) weights", header="raw mean", level=W)
RAW_STD = _m("raw_std", "population std of the raw weights", header="raw std", level=W)
RAW_MIN = _m("raw_min", "min of the raw weights", header="raw min", level=W)
RAW_MAX = _m("raw_max", "max of the raw weights", header="raw max", level=W)
WEIGHT_MEAN = _m("weight_mean", "mean of the applied weights", header="w mean", level=W)
WEIGHT_STD = _m("weight_std", "population std of the applied weights", header="w std", level=W)
WEIGHT_MIN = _m("weight_min", "min of the applied weights", header="w min", level=W)
WEIGHT_MAX = _m("weight_max", "max of the applied weights", header="w max", level=W)
ESS = _m(
    "ess",
    "(Σw)² / (n Σw²) of the applied weights over the units",
    header="ESS",
    fmt=Fmt.SHARE,
    level=W,
)
ESS_RAW = _m(
    "ess_raw", "(Σw)² / (n Σw²) of the raw weights", header="ESS raw", fmt=Fmt.SHARE, level=W
)

# --- per-step curves derived from the dumps (training curves) -------------------------------
REWARD_MEAN = _m("reward_mean", "mean sequence reward of the step (from the dumps)", level=V)
ENTROPY_MEAN = _m(
    "entropy_mean",
    "mean per-token entropy of the step's model tokens (from the dumps)",
    level=V,
    unit="nats",
)

del C, T, Q, B, P, W, V

COUNT_METRICS = (TOKENS, SEQUENCES, OVERFLOW_TOKENS)
TOKEN_METRICS = (
    VLLM_KL,
    KL_K1,
    KL_K2,
    LOG_RATIO_MEAN,
    LOG_RATIO_STD,
    ABS_LOG_RATIO_MEAN,
    ABS_LOG_RATIO_MAX,
    CHI2_TOKEN,
    RATIO_DEV_1E4,
    PROB_ABS_DIFF_MEAN,
    PROB_ABS_DIFF_MAX,
    PROB_PEARSON,
    ROLLOUT_PROB_MEAN,
    VLLM_KL_CLAMPED,
    EXTREME_FRAC_TAU2,
    IS_OOB_RATIO,
    PROB_DIFF_MEAN,
)
SEQUENCE_METRICS = (
    VLLM_KL_SEQ_MEAN,
    ROLLOUT_LOG_PPL,
    TRAINER_LOG_PPL,
    ROLLOUT_PPL,
    TRAINER_PPL,
    LOG_PPL_DIFF,
    LOG_PPL_ABS_DIFF,
    PPL_RATIO,
    LOG_PPL_PEARSON,
    CHI2_SEQ,
    RATIO_SEGMENT_MEAN,
)
QUANTILE_METRICS = (LOG_RATIO_P01, LOG_RATIO_P50, LOG_RATIO_P99)
SHARE_METRICS = (TOKEN_SHARE, KL_SHARE)
CORRECTION_METRICS = (
    UNITS,
    TOKENS,
    SEQUENCES,
    TOKEN_FRACTION,
    SEQUENCE_FRACTION,
    RAW_MEAN,
    RAW_STD,
    RAW_MIN,
    RAW_MAX,
    WEIGHT_MEAN,
    WEIGHT_STD,
    WEIGHT_MIN,
    WEIGHT_MAX,
    ESS,
    ESS_RAW,
)

BY_KEY: dict[str, Metric] = {m.key: m for m in ALL}


EXTREME_FRAC_PREFIX = "extreme_frac_tau"


def extreme_frac(tau: float) -> Metric:
    """The extreme fraction at ratio ``tau``: ``extreme_frac_tau2`` for 2, and for another tau
    the same metric named ``extreme_frac_tau{tau:g}`` (``extreme_frac_tau1.5``)."""
    key = f"{EXTREME_FRAC_PREFIX}{tau:g}"
    if key not in BY_KEY:
        BY_KEY[key] = Metric(
            key,
            f"share of tokens with |r| > ln({tau:g})",
            header=f"extreme τ{tau:g}",
            fmt=Fmt.SHARE,
        )
    return BY_KEY[key]


def is_extreme_frac(key: str) -> bool:
    """Whether a JSON key is an extreme fraction (at any tau)."""
    return key.startswith(EXTREME_FRAC_PREFIX)


def by_key(key: str) -> Metric:
    """The registry's metric of a JSON key (KeyError for a name that is not a metric)."""
    if key not in BY_KEY and is_extreme_frac(key):
        return extreme_frac(float(key[len(EXTREME_FRAC_PREFIX) :]))
    return BY_KEY[key]


def granularity(metric: Metric) -> str:
    """What a metric is a mean over, as the JSON says it (``granularity``): ``token-mean`` (all
    the group's tokens weigh alike), ``sequence-mean`` (a mean of per-sequence (segment)
    values: every sequence weighs alike), ``count``, or the metric's level otherwise."""
    return {Level.TOKEN: "token-mean", Level.SEQUENCE: "sequence-mean"}.get(
        metric.level, str(metric.level)
    )


def markdown_table(level: Level) -> str:
    """The docs/metrics.md table of one level: name, header, unit and definition."""
    lines = ["| name | shown as | definition |", "| --- | --- | --- |"]
    for m in ALL:
        if m.level == level:
            unit = f" ({m.unit})" if m.unit else ""
            cells = (f"`{m.key}`", m.header, f"{m.description}{unit}")
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def docs_tables() -> str:
    """Every table of docs/metrics.md, between the markers the tests look for:
    ``python -c 'from mismatchctl.stats import registry; print(registry.docs_tables())'``."""
    return "\n\n".join(
        f"<!-- registry:{level} -->\n{markdown_table(level)}\n<!-- /registry:{level} -->"
        for level in Level
    )
