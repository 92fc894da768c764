"""The thresholds several checks of `diagnose` share: the severity bands, the level of every
interval, the localized pattern, and the z of a systematic difference. Each check's own
thresholds live in its module (``checks/<name>.py``, its ``Thresholds``).

Sources, here and in every check: the severity bands and magnitudes of docs BACKGROUND.md /
METRICS.md (the study's batch groups, published healthy values), the signatures of each cause
derived from what it does to the two sides (stated per constant), and, where neither fixes a
number, a conservative choice that keeps a healthy run quiet: each such choice says so.
"""

from __future__ import annotations

from mismatchctl.stats import BANDS

LOW_MAX: float = BANDS[0][1]
"""1e-3: upper edge of the ``low`` band of a batch's vllm_kl (the study's group 1; healthy stacks
report vllm_kl around 1e-3 or below). Below it no mismatch pattern is worth a warning."""

MEDIUM_MAX: float = BANDS[1][1]
"""2e-2: upper edge of the ``medium`` band (group 2). Above it a pattern is a failure."""

HIGH_MAX: float = BANDS[2][1]
"""1e-1: upper edge of the ``high`` band, the study's batch-filter threshold: above is ``severe``."""

OFFSET_Z = 5.0
"""|mean r| / its sequence-clustered standard error at or above this is "far from 0" (5 sigma: the
clustered error is an approximation, and a report reads millions of tokens). The offset check's,
and the top-p signature's on the mean ratio (the top_p and temperature checks)."""

# --- relative findings: judged on intervals, whatever the absolute level ---------------------
# A fault of a code path (an attention kernel at long KV lengths, one engine batch shape, one gpu,
# some steps) can sit far below the severity bands and still be a fault: these checks compare a
# part of the run with the rest of it, or the run with a baseline, at the same token
# probabilities (the probability bin is the stratum; docs/explain.md), with sequence-clustered
# 95% intervals. A pattern warns when its point estimate reaches the factor AND its interval
# excludes the lower bound; it fails when the interval's low end reaches the fail factor, or the
# pattern is there and the affected part is above ``MEDIUM_MAX`` (``contrasts.relative``).
# The factors sit below the smallest fault they are meant to catch, the interval's low end
# above healthy drift: a gate on the point estimate at exactly a fault's size passes that fault
# as often as not (planted 2x faults estimated at 1.9x-1.999x, intervals 1.7-2.2, were passed
# at 2x: one gpu, two spike steps, the turns after tool responses, a weight lag).

LEVEL = 0.95
"""Level of every interval of a relative finding."""

LOCAL_FACTOR = 1.75
"""A localized cell (``explain`` without a baseline: a conjunction of up to three dimensions
against the rest of the run at the same token probabilities) at 1.75x the rest's rate... The
localization's own gates (family-wise significance, 1.25x specificity, 1% of the mass) let
through cells a few tens of percent hotter on large data: real runs drift that much between
steps and data sources without a fault. Twice is the smallest excess of the faults we know
(2x-1000x for kernel faults, BACKGROUND.md): the point gate sits below it, so that a 2x fault
estimated a little low still warns, and ``LOCAL_CI_LOW`` keeps the drift out (a cell must be
hotter than 1.5x with 97.5% confidence). The localized, turn_ends, hot_sequences and hardware
checks judge their parts by it."""

LOCAL_CI_LOW = 1.5
"""...with the 95% interval's low end at 1.5 or more (tight enough that the cell is hotter by a
margin, not only significantly)."""

LOCAL_FAIL = 10.0
"""The interval's low end a decade above the rest: fail whatever the level."""

LOCAL_MIN_SHARE = 0.05
"""A localized cell warns only when it holds this share of the run's K3 mass beyond the rest's
rate (its ``excess_share``); a failing one whatever it holds. Under a twentieth, fixing
whatever makes the cell hot moves the run's level by under 5%, and a search over thousands of
cells finds such spots on healthy data: the 8192-token Llama's healthy run at temperature 0.6
with a bf16 trainer (docs/diagnose.md "A trainer in bf16") warned at turn 1, positions 16-63,
step 3: 2.0x the rest (95% CI 1.5-2.7), 2% of the tokens, 1.9% of the mass. Of every part
named first in the corpora, three warned under it: that one, and an fp8 KV cache's earliest
positions on the GPT-2 member (2.6% and 2.5%: misnamed, the precision) and a subtle split-KV
merge's step-6 corner on the Gemma2 (4.0%: its only part seen); the planted paths' parts hold
8.4% and more."""

TOOL_CI_LOW = 1.25
"""Low end of the 95% interval of the later/first ratio needed to warn (sequence-clustered: the
two turn kinds share sequences, which the interval accounts for): the tool_responses check's,
and the localized check's when it asks whether a part found is the later turns seen by
position."""
