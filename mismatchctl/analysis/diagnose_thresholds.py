"""The thresholds of `diagnose`, each with where it comes from.

Sources: the severity bands and magnitudes of docs BACKGROUND.md / METRICS.md (the study's batch
groups, published healthy values), the signatures of each cause derived from what it does to the
two sides (stated per constant), and, where neither fixes a number, a conservative choice that
keeps a healthy run quiet: each such choice says so.
"""

from __future__ import annotations

import math

from mismatchctl.stats import BANDS
from mismatchctl.stats.sentinels import PAD_RUN_MIN

LOW_MAX: float = BANDS[0][1]
"""1e-3: upper edge of the ``low`` band of a batch's vllm_kl (the study's group 1; healthy stacks
report vllm_kl around 1e-3 or below). Below it no mismatch pattern is worth a warning."""

MEDIUM_MAX: float = BANDS[1][1]
"""2e-2: upper edge of the ``medium`` band (group 2). Above it a pattern is a failure."""

HIGH_MAX: float = BANDS[2][1]
"""1e-1: upper edge of the ``high`` band, the study's batch-filter threshold: above is ``severe``."""

# --- data integrity ---------------------------------------------------------------------------
ALIGN_MARGIN = 0.05
"""A lag +-1 correlation of the two sides above the lag-0 one by this much means one side is
shifted by a position (FORMATS.md: "correlation at lag 0 should clearly beat lag +-1"). In
simulation aligned sides correlate at 0.95 or more at lag 0 up to vllm_kl 0.1, against about 0 at
lag +-1, and a shifted side the other way round: the margin only absorbs ties."""

ALIGN_WARN_CORR = 0.8
"""A lag-0 correlation of the logprobs below this (with no better lag) means the two sides hardly
describe the same tokens: published train/inference correlations are above 0.98."""

SENTINEL_FAIL_SHARE = 1e-3
"""Tokens inside one-sided 0.0 runs above this share of all tokens: fail (any: warn). Any value
<= -1000 fails. Definitions in ``mismatchctl.stats.sentinels``."""

EMPTY_WARN_SHARE = 0.2
"""Sequences without a model token (fully masked) above this share: warn. Rejected or truncated
samples are normal in small numbers; a fifth of them is worth checking the mask mapping."""

EMPTY_FAIL_SHARE = 0.5
"""More than half the sequences empty: the mask column is most likely not a response mask."""

TRAILING_ZERO_RUN: int = PAD_RUN_MIN
"""8 (``stats.sentinels.PAD_RUN_MIN``): a sequence whose last 8 or more stored tokens are exactly
0.0 on both sides ends in right padding stored as model tokens (a dump ingested without its
mask). Real responses end in at most a few tokens that round to probability 1 on both sides (a
closing tag, the end-of-sequence token after a stop string); right padding runs for tens to
thousands of positions. Any such sequence warns."""

TRAILING_ZERO_FAIL_SHARE = 1e-3
"""Tokens inside such trailing runs above this share of all tokens: fail. Padding enters every
per-token mean with r = 0 (vllm_kl, mean |r|, the perplexities), pulling it down by its share;
from 0.1% that bias reaches the third significant digit the report prints."""

DUPLICATE_FAIL_SHARE = 1e-3
"""Exact duplicate sequences (a double write) above this share of the sequences: fail (any:
warn). A repeated sequence weighs twice in every mean; from 0.1% that reaches the third
significant digit the report prints, and a real double write repeats a whole batch or file."""

# --- semantic ---------------------------------------------------------------------------------
OFFSET_Z = 5.0
"""|mean r| / its sequence-clustered standard error at or above this is "far from 0" (5 sigma: the
clustered error is an approximation, and a report reads millions of tokens)."""

OFFSET_SIGN_SHARE = 0.65
"""Share of tokens whose r has the sign of the mean. Symmetric noise gives ~0.5 (0.53 with logit
noise of 0.3); a temperature on one side gives 0.74-0.83 and a top-p renormalisation ~1.0
(simulated softmax over a 64-token vocabulary)."""

OFFSET_WARN = 0.005
"""|mean r| in nats from which a systematic offset warns: half the low end of the healthy mean
|delta logprob| (0.006-0.011, BACKGROUND.md)."""

OFFSET_FAIL = 0.02
"""|mean r| from which a systematic offset fails: twice the high end of the healthy mean |delta
logprob|, below the 0.05 seen in failing runs."""

TEMP_R2_WARN, TEMP_R2_FAIL = 0.1, 0.2
"""Share of the variance of r explained by a line in the rollout logprob. Noise (any size) gives
under 0.01; a temperature of 0.6-1.2 on one side gives 0.12-0.53 (simulated as above)."""

TEMP_SLOPE_WARN, TEMP_SLOPE_FAIL = 0.015, 0.03
"""|slope - 1| of trainer on rollout logprobs. Noise gives under 0.01; a temperature of 0.9 or
1.1 on one side gives about 0.04 (the least squares slope is pulled towards 1 because the
log-partition term varies between contexts, so it understates the temperature's distance to 1)."""

TOPP_DEFICIT_WARN, TOPP_DEFICIT_FAIL = 0.005, 0.02
"""1 - mean(rho): for proper distributions over the same vocabulary the mean ratio is exactly 1
in expectation (sum of p_train over the sampled support), whatever the noise; a top-p/top-k
renormalisation on the rollout side makes it the kept mass (0.896 at top_p = 0.8, BACKGROUND.md;
0.965 at top_p = 0.95 in simulation)."""

TOPP_NEGATIVE_SHARE = 0.9
"""Share of tokens with r < 0 (rollout higher) that goes with a renormalised rollout side: every
kept token's probability is divided by the kept mass (~1.0 in simulation, 0.5 for noise)."""

# --- inference path ---------------------------------------------------------------------------
LOW_PROB = 1e-3
"""p_infer below this is a low-probability token (the report's ``low_prob_token_share``)."""

LOWPROB_KL_SHARE = 0.5
"""The low-probability tokens hold at least half the K3 mass..."""

LOWPROB_CONCENTRATION = 10.0
"""...and at least 10x their share of tokens: the "low-probability trap" of BACKGROUND.md."""

TOOL_RATIO_WARN, TOOL_RATIO_FAIL = 2.0, 5.0
"""later/first vllm_kl ratio. The tool-response amplification of BACKGROUND.md; 2x is a clear
gap between two token populations of one run, 5x a dominant one."""

PEARSON_DROP_WARN = 0.05
"""Drop of the log-ppl Pearson correlation from first to later turns (healthy correlations sit
near 0.99: a 0.05 drop is the gap between a bf16 and an fp32 head, five times over)."""

GPU_FACTOR_WARN, GPU_FACTOR_FAIL = 3.0, 10.0
"""A gpu's vllm_kl over the median of the other gpus'. BACKGROUND.md: H20 5e-4..1e-3, L20
1e-3..1e-2, A100 1e-2..1 for the same code: 3x is one band apart, 10x a decade."""

SEVERE_GPU_SHARE = 0.8
"""Severe batches are concentrated on a gpu when it holds this share of them (with at least
``MIN_SEVERE_FOR_CONCENTRATION``) while holding less of all batches."""

MIN_SEVERE_FOR_CONCENTRATION = 3

# --- trajectory -------------------------------------------------------------------------------
MIN_STEPS = 8
"""Fewer steps than this: spikes, trend and spiral are not assessed (a median/MAD and a
Theil-Sen slope need a few points to mean anything)."""

SPIKE_Z = 5.0
"""Robust z-score (median/MAD of log10 vllm_kl over the run's steps) of a spike."""

SPIKE_FACTOR = 3.0
"""...and at least 3x the run's median vllm_kl (a band apart): small series have small MADs."""

TREND_RISE_WARN = math.log10(3.0)
"""Fitted rise of log10 vllm_kl from the first to the last step (Theil-Sen): 3x warns..."""

TREND_RISE_FAIL = 1.0
"""...a decade fails (the "not static" mismatch of BACKGROUND.md: once it climbs, it keeps going)."""

TREND_POSITIVE_SHARE = 0.7
"""Share of positive pairwise slopes needed to call a series rising (0.5 when trendless)."""

SPIRAL_RHO = 0.7
"""Spearman correlation of per-step vllm_kl and trainer_ppl, both rising: the vllm-kl / fsdp-ppl
spiral of BACKGROUND.md."""

SEVERE_FAIL_SHARE = 0.1
"""Share of batches in the severe band (vllm_kl > 0.1, the study's batch filter) that fails."""

HIGH_WARN_SHARE = 0.25
"""Share of batches in the high band or worse that warns (a quarter of training in group 3)."""

STALE_FACTOR_WARN, STALE_FACTOR_FAIL = 2.0, 5.0
"""vllm_kl of rollouts made with older weights (lag >= 1) over that of current ones."""

VLLM_KL_FLOOR = 1e-12
"""Per-step vllm_kl values are floored here before taking logs (bitwise-aligned steps are 0)."""
