"""The thresholds of `diagnose`, each with where it comes from.

Sources: the severity bands and magnitudes of docs BACKGROUND.md / METRICS.md (the study's batch
groups, published healthy values), the signatures of each cause derived from what it does to the
two sides (stated per constant), and, where neither fixes a number, a conservative choice that
keeps a healthy run quiet: each such choice says so.
"""

from __future__ import annotations

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

ALIGN_PART_FAIL_SHARE = 1e-3
"""Turns shifted by a position on their own (``mismatchctl.stats.misalign``: a shifted pairing
ten times closer than the stored one, where the stored one costs a K3 of 0.02 or more): any
warns, holding this share of the tokens fails (as sentinels: a writer's error, not numerics)."""

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

# --- relative findings: judged on intervals, whatever the absolute level ---------------------
# A fault of a code path (an attention kernel at long KV lengths, one engine batch shape, one gpu,
# some steps) can sit far below the severity bands and still be a fault: these checks compare a
# part of the run with the rest of it, or the run with a baseline, at the same token
# probabilities (the probability bin is the stratum; docs/explain.md), with sequence-clustered
# 95% intervals. A pattern warns when its point estimate reaches the factor AND its interval
# excludes the lower bound; it fails when the interval's low end reaches the fail factor, or the
# pattern is there and the affected part is above ``MEDIUM_MAX``.
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
hotter than 1.5x with 97.5% confidence)."""

LOCAL_CI_LOW = 1.5
"""...with the 95% interval's low end at 1.5 or more (tight enough that the cell is hotter by a
margin, not only significantly)."""

LOCAL_FAIL = 10.0
"""The interval's low end a decade above the rest: fail whatever the level."""

BASELINE_FACTOR = 1.5
"""The target's rate over the baseline's at the target's token mix (``explain --baseline``):
1.5x with the interval's low end above ``BASELINE_CI_LOW`` warns. Two healthy runs of one stack
differ by their prompts and seeds: the sample data's two healthy captures differ by 1.1x, and
different data mixes by up to 1.3x at the same token probabilities."""

BASELINE_CI_LOW = 1.2
"""...the low end of the interval of that ratio (above the healthy differences just named)."""

BASELINE_FAIL = 5.0
"""The interval's low end at 5x the baseline: fail (half a decade above a known-good run)."""

IMPROVED_CI_HIGH = 1.0
"""The interval's high end below 1: the target is better than the baseline, reported as such."""

LOCALIZED_EXCESS_SHARE = 0.5
"""With a baseline, an excess is *localized* when one finding carries at least half of it;
otherwise it is spread (the signature of a policy mismatch when the dimensions are uniform)."""

UNIFORM_DIMS_MIN = 2
"""A spread excess is called uniform when at least this many dimensions explain nothing (turn,
probability bin, step, gpu...): stale or wrong weights change every token's distribution, not one
code path's."""

# --- template or numerics (turn_edges; analysis/turn_edges.py) ---------------------------------
EDGE_FACTOR = 1.5
"""The first ``EDGE_TOKENS`` (8) tokens of the turns after a tool response against the rest of
those turns, at the same token probabilities: twice the rate with the interval's low end at
``EDGE_CI_LOW`` is a turn-start pattern (the relative-finding rule above; ``LOCAL_FACTOR``'s
reasoning: 2x is the smallest fault we know and above healthy drift). It names a rendering fault
only when the first turns' own starts are not hot (their ratio's interval low end below
``EDGE_CI_LOW``, or the later turns' ratio at least ``EDGE_FACTOR`` times theirs): engine
numerics and the natural uncertainty of a response's first tokens touch every turn alike."""

EDGE_CI_LOW = 1.25
EDGE_FAIL = 10.0

# The turns' last token (turn_ends; analysis/checks_ends.py) is judged as a localized part:
# ``LOCAL_FACTOR``, ``LOCAL_CI_LOW`` and ``LOCAL_FAIL`` on its contrast with every other token
# at the same token probabilities, and the same pattern on its contrast with the seven tokens
# before it in the same turns (a stop fault hits the last token alone; a mismatch growing with
# the KV position or in the small decode batches at the end of generation, as the sample
# ``faulty-attn``'s, makes the ends 6x the rest but 1.8x the tokens before them, interval
# 0.78-4.1). The responses' last token alone is judged the same way (the turns ending before a
# tool response dilute an end-of-sequence fault: planted at 2x, 1.3x over every turn's end,
# 1.9-2.2x alone). Planted: the last token at 3x named 4/4, at 2x 1 of 2.

TOP_SHARE = 0.01
"""The largest-|r| tokens whose place is counted: the top 1% of the selection's tokens (at an |r|
histogram boundary, so at least that many), and at least ``TOP_LEAST``."""

TOP_LEAST = 50

TOP_ENRICHMENT = 1.25
"""A rendering fault also puts the largest-|r| tokens of the later turns at their starts: at
least 1.25 times as many as chance would at the same token probabilities, ``TOP_Z`` standard
errors above it (a count, robust to the few heavy sequences that can make a K3 ratio of a small
cell look hot, such as a spike step's, which put no more of them at the starts than elsewhere),
and the turn starts' first half (distances 0-3) at least as hot as their second (4-7): the
mismatch decays with the distance from the tool response. A fault tripling the first token's
K3 and fading over a few tokens (1.6x over the first 8, as ``EDGE_FACTOR`` asks) puts about
1.3x as many there: at 1.5x such faults were passed (the factors' rule above: below the
signature of the smallest fault, ``TOP_Z`` keeping chance out)."""

TOP_Z = 3.0

# --- token classes (token_classes; analysis/token_classes.py) ---------------------------------
CLASS_TOP_SHARE = 0.01
"""The worst tokens whose class is counted: the 1% of the selection's model tokens with the
largest |r| (as ``TOP_SHARE``), ..."""

CLASS_TOP_LEAST = 50
"""... at least 50 (a count of fewer says nothing) ..."""

CLASS_TOP_MOST = 500
"""... and at most 500: the top-k keeps its rows in memory per part in flight, and 500 tokens
already tell a 2x excess of a class holding 2% of the tokens (10 expected, 20 found) at 3 SE."""

CLASS_FACTOR = 2.0
"""A class (byte-fallback, special, whitespace-only) is over-represented among the worst tokens
when it holds at least twice the count that chance puts there at the same token probabilities
(``LOCAL_FACTOR``'s reasoning: the smallest excess of the faults we know, above healthy drift),
..."""

CLASS_Z = 3.0
"""... ``CLASS_Z`` standard errors above that expectation (the binomial variance of the count,
summed over the probability bins: three classes tested, each at about one in a thousand by
chance) ..."""

CLASS_MIN = 5
"""... and it holds at least 5 of the worst tokens: a class of a few special tokens may expect
0.1 of them by chance, and 2 found would be 6 SE without being a cluster."""

CLASS_FAIL_SHARE = 0.5
"""An over-represented class that holds half the worst tokens or more fails: the mismatch is
mostly on that kind of token, not a tail of it. (Not a larger factor: the expectation is taken
at the same token probabilities, where a class such as whitespace may hold a third of the likely
tokens, so that no count reaches more than three times chance.)"""

# --- inference path ---------------------------------------------------------------------------
LOW_PROB = 1e-3
"""p_infer below this is a low-probability token (the report's ``low_prob_token_share``)."""

LOWPROB_KL_SHARE = 0.25
"""The low-probability tokens hold at least a quarter of the K3 mass... (they are under 1% of
the tokens: the sample data's captures put 1-7% of the mass there, a run whose trainer scores
those tokens only 2x less likely than the engine 40%, which half the mass passed)"""

LOWPROB_CONCENTRATION = 10.0
"""...and at least 10x their share of tokens: the "low-probability trap" of BACKGROUND.md. This
one stays gated on the level (above ``LOW_MAX``): K3 always concentrates on unlikely tokens, and
the trap is a matter of how much mass that is."""

TOOL_RATIO_WARN, TOOL_RATIO_FAIL = 1.75, 5.0
"""later/first vllm_kl ratio. The tool-response amplification of BACKGROUND.md; 2x is a clear
gap between two token populations of one run: warn from 1.75x (below it, as ``LOCAL_FACTOR``)
with the interval's low end above ``TOOL_CI_LOW``; an interval above 5x a dominant one (fail;
also the warning pattern with later turns above ``MEDIUM_MAX``)."""

TOOL_CI_LOW = 1.25
"""Low end of the 95% interval of the later/first ratio needed to warn (sequence-clustered: the
two turn kinds share sequences, which the interval accounts for)."""

PEARSON_DROP_WARN = 0.05
"""Drop of the log-ppl Pearson correlation from first to later turns (healthy correlations sit
near 0.99: a 0.05 drop is the gap between a bf16 and an fp32 head, five times over)."""

PEARSON_MIN_SEQUENCES = 30
"""Sequences with later turns needed to judge the Pearson drop (a correlation of fewer is noise)."""

SEQ_HOT_MIN = 10
SEQ_HOT_SHARE = 0.02
SEQ_ASYMMETRY = 4.0
"""Sequences hotter than the other sequences of their step (``stats/hot_sequences.py``: each
sequence's z on the relative mismatch log(|r| / |lr|) of its tokens, at the same turn kind and
token probability, centered on its step's median; hot above 3, cold below -3, 0.13% each under
the null): warn when at least ``SEQ_HOT_MIN`` sequences and ``SEQ_HOT_SHARE`` of those tested
are hot, ``SEQ_ASYMMETRY`` times as many as are cold (sequences that merely differ, by context
or length, fill both tails alike: the 16 sample runs have 0-16 hot and 1-16 cold, top-p 14
against 7), and the hot ones' K3 rate at the same cells is ``LOCAL_FACTOR`` times the others'
(as a localized part); fail from ``LOCAL_FAIL``. Planted (1 sequence in 8 at 3x, 32 a step
for 24 steps): 35 hot against 6 cold, rate 3.1x; at 10x 95 against 4, rate 9.8x."""

GPU_FACTOR_WARN, GPU_FACTOR_FAIL = LOCAL_FACTOR, 10.0
"""A gpu's vllm_kl over the median of the other gpus': warn from ``LOCAL_FACTOR`` (1.75x) with
its interval against the other gpus at the same token probabilities above ``LOCAL_CI_LOW``, as
the localized check judges a gpu found by its search (it was 3x, "one band apart", and a gpu at
2x was warned of by the localized check and passed by this one); an interval above 10x a decade
(fail). BACKGROUND.md: H20 5e-4..1e-3, L20 1e-3..1e-2, A100 1e-2..1 for the same code, most of
it a kernel fault on the non-Hopper gpus (FlashAttention-2's split-KV path under vLLM's cascade
attention), which ``disable_cascade_attn`` brought to about 1e-3: a gap between gpu generations
is worth a look, not a law of nature. With three gpus or more the same gates judge the hottest
two or more against the others (pooled vllm_kl, and their contrast at the same token
probabilities) when no gpu stands out: three generations of four at 3x put each at the median
of the others."""

SEVERE_GPU_SHARE = 0.8
"""Severe batches are concentrated on a gpu when it holds this share of them while holding less
of all batches ..."""

SEVERE_GPU_ALPHA = 0.01
"""... and the binomial chance of that many on a gpu with its share of the batches is below
this: three severe batches out of three on one of two gpus happen by chance one time in eight,
seven out of seven one time in 128."""

# --- trajectory -------------------------------------------------------------------------------
MIN_STEPS = 4
"""Fewer steps than this: spikes, regimes, trend and spiral are not assessed. Each step's rate
comes with its own sequence-clustered variance (``stats/step_regimes.py``), so four steps are
enough for an interval; the split into two groups needs two on each side to tell a regime from
a spike."""

REGIME_ALPHA = 0.01
"""The steps differ at all: Cochran's homogeneity test of their log rate ratios rejects at this
level (a healthy run's steps pass it: their rates differ by sampling noise only)."""

REGIME_FACTOR = 1.75
"""The elevated group of steps at 1.75x the others' rate at the same token mix (the same factor
as a localized cell, ``LOCAL_FACTOR``)..."""

REGIME_CI_LOW = 1.5
"""...with the low end of its 95% interval (Bonferroni over the cuts tried) at 1.5 or more."""

REGIME_FAIL = 10.0
"""The interval's low end a decade above the other steps: fail whatever the level."""

SPIKE_MAX_SHARE = 0.25
"""Elevated steps are *spikes* when they are at most a quarter of the steps (isolated events);
more, and they are a second *regime* (a code path some steps take, or a change from a step on)."""

TREND_RISE_WARN = 2.5
"""Fitted rise of the per-step rate from the first to the last step: a rise of 3x (a band apart)
warns, and the gate sits below it (a 3x growth planted over 24 steps was estimated at 2.8x,
interval 2.6-3.2, and passed at 3x)..."""

TREND_CI_LOW = 1.5
"""...when the rise's 95% interval (random-effects line over the steps) starts at 1.5x or more."""

TREND_RISE_FAIL = 10.0
"""The interval's low end a decade up: fail (the "not static" mismatch of BACKGROUND.md: once it
climbs, it keeps going); also any rise that ends above ``MEDIUM_MAX``."""

TREND_POSITIVE_SHARE = 0.7
"""Share of positive pairwise slopes needed to call the trainer's perplexity rising (0.5 when
trendless), for the spiral."""

SPIRAL_RHO = 0.7
"""Spearman correlation of per-step vllm_kl and trainer_ppl, both rising: the vllm-kl / fsdp-ppl
spiral of BACKGROUND.md (the vllm_kl rise must pass the trend check's test)."""

SEVERE_FAIL_SHARE = 0.1
"""Share of batches in the severe band (vllm_kl > 0.1, the study's batch filter) that fails."""

HIGH_WARN_SHARE = 0.25
"""Share of batches in the high band or worse that warns (a quarter of training in group 3)."""

SIGN_DISPERSION_WARN = 1.5
SIGN_DISPERSION_FAIL = 3.0
SIGN_ALPHA = 1e-3
"""Signs of r that agree within sequences (``policy_signs``; ``stats/sign_coherence.py``): the
dispersion of each sequence's count of r > 0 around its cells' rates is 1 when the signs are
independent along a sequence (numeric noise) and grows when whole responses lean one way (another
policy). Warn from 1.5 with the chi-square test (one degree of freedom a sequence) below
``SIGN_ALPHA``; fail from 3. Measured on the sample runs (a real tiny model's numerics): healthy,
improved, kernel, gpu, template, top-p, temperature and MoE runs 0.93-1.25 (the highest,
``spiky-6``, a biased split-KV combine on two steps of six), the two runs one optimizer step
behind 2.1 (``stale-weights``) and 2.5 (``stale-subtle``, which carries no version column: no
other check without a baseline saw it)."""

STALE_FACTOR = 1.5
"""vllm_kl of rollouts made with older weights (lag >= 1) over that of current ones: 1.5x warns
when the interval's low end reaches ``STALE_CI_LOW``; an interval above ``STALE_FAIL`` fails.
The two are rollouts of one run told apart by the weights' version alone, a target and its
baseline (``BASELINE_FACTOR``'s 1.5x and 1.2x, not the 2x of a part of a run found by a search
over thousands of cells): at 2x, a lag that doubles the mismatch was passed as often as not
(1.999x, interval 1.8-2.2, in a planted run)."""

STALE_CI_LOW = 1.2
STALE_FAIL = 5.0

STALE_TAGS = ("weight_lag", "staleness", "policy_lag")
"""Run tags naming how many weight versions the rollouts lag behind the trainer (an integer):
``--tag weight_lag=1`` at ingest. A lag of 1 or more is a policy mismatch by construction."""

VLLM_KL_FLOOR = 1e-12
"""Per-step vllm_kl values are floored here before taking logs (bitwise-aligned steps are 0)."""

# --- objective --------------------------------------------------------------------------------
MIN_CORRECTION_ESS = 0.5
"""A correction whose effective sample size (share of the batch) falls below one half discards
most of the signal: it is never advised; fix the cause instead."""

MAX_CORRECTION_REJECTED = 0.5
"""Nor one that rejects (masks) more than half the sequences."""

MAX_CORRECTION_CLIPPED = 0.9
"""Nor a truncation that clips nine units in ten at its cap: the applied weights are then nearly
a constant, and their ESS (near 1) says nothing about the signal kept (``whatif``)."""
# --- routing (MoE) ------------------------------------------------------------------------------
ROUTING_RATIO_WARN = 1.5
"""vllm_kl of tokens produced by a position whose routes differ (flipped) over that of the others:
1.5x or more says the flips carry excess mismatch. A conservative choice: miles' measurements put
natural routing at 2.7x the |dlogp| of replayed routes (0.369 against 0.139), far above it."""

ROUTING_SHARE_WARN = 0.10
"""...and the flipped tokens carry at least this share of the paired tokens' K3 (below it, the
flips are too few to matter whatever their ratio): a conservative choice."""

ROUTING_SHARE_FAIL = 0.30
"""Flipped tokens carrying 30% of the K3 at the ratio above: routing is a main source of the
mismatch, rollout routing replay is the fix (a conservative choice)."""

R3_VIOLATION_FAIL = 0.01
"""With routing replay on, the share of compared positions whose trainer routes differ from the
engine's should be 0; miles' own replay check fails above 1e-2 (its
``replay_check_max_mismatch_fraction``). Any violation warns."""
