"""What changed at some steps whose responses are hot throughout (``whole_steps.py``): the
weights the engine served, its sampling, or its arithmetic. Each leaves its own mark on the
tokens of those steps, whatever its size.

- **The sampling** (a truncation or a logit processor turned on at a step, its processed
  logprobs returned): mass removed on the rollout side there, the steps' mean ratio
  ``E_q[p/q]`` under 1 (``stats/mean_ratio.py``) by ``DEFICIT_Z`` standard errors and
  ``DEFICIT_PER_K3`` times their K3 per token (``processor.py``'s thresholds), where the other
  steps keep it at 1. Top-p 0.9 from the middle step on (``un-topp-restart``, both TinyLM
  draws): 0.944, 50 standard errors, 23x the K3; the corpora's other weights and precision
  losses at some steps 0.17-0.31x, within 0.7 standard errors; top-p at every step beside
  weights a checkpoint behind lowers the other steps' too (``combo-topp-stale-mid``: the
  steps' split is the weights').
- **The weights** (stale or reloaded weights, a partial sync): other weights move some token
  ids' logits on their own, so each id's own shift carries a share of ``r``'s variance
  (``token_shift``'s ``id_share``, over the run) of ``ID_WEIGHTS`` or more. The corpora's
  policies named by their steps carry 0.0071-0.036 (stale weights in every family and draw
  0.0071-0.021, a reload at mid-run 0.0086-0.011, a partial sync of the lm_head 0.036; fp8
  weights loaded at a restart 0.026: other weights too, as ``pr-weights-fp8`` is named).
  Those ids must move *at those steps*: each id's shift there beyond the same id's shift at the
  other steps (``stats/step_ids.shift_beyond``) carries ``ID_WEIGHTS`` or more of the steps'
  own variance. What moves the ids alike at every step (a re-rendered chat template, a logit
  processor, a checkpoint every step shares) is not what changed at these: the Llama
  pre-trained 90 iterations' re-rendered tool tag beside a split-KV merge that makes five steps
  of six hot carries 4.1% over the run and 0.0% beyond the other step (the tag's ids, their
  shifts correlated 0.92 with the other step's); it was named the weights. Other weights at some
  steps carry 1.0-17% beyond (stale weights whose step 1 or whose later steps stand out 2.0%
  and 3.4%, a reload at mid-run 1.0%, one beside top-p at every step 1.7%, stale weights
  beside top-p 17%); a faulty kernel on every token of two steps 1.8% (the arithmetic's ids
  move there alone too, under the run's ``ID_WEIGHTS``), so the test only keeps a shift the
  run's share would take for the weights from being read as them where every step shares it.
- **The engine's arithmetic** (a faulty kernel every token of those steps takes, a restart
  with an fp8 KV cache or another accumulator): noise on every token, no id moved on its own:
  a split-KV combine without the row sums at every batch size and KV length from the middle
  step on (``un-splitkv-restart``) 0.0017 and 0.0048 in the two draws, the sample data's
  ``spiky-6`` (that kernel at steps 3 and 5) 0.0052, fp8 KV caches (e4m3, e5m2) and a bf16
  lm_head accumulator from the middle step on 0-0.002, the fp8 caches of every corpus
  0-0.003. Those stay the code path of the steps ("some steps: a replica, or a path or the
  weights switched at a step"): a kernel every token takes and a precision lost at a restart
  are one picture, the engine changed at those steps, and its advice asks what changed there.

A scaled plant (every token of some steps multiplied alike) carries a healthy run's share (0 to
0.0076 over the corpora's healthy runs, most under 0.005): mostly the engine's arithmetic. The
band between the arithmetic's 0.0052 and the weights' 0.0071 is narrow; ``ID_WEIGHTS`` sits in
it.

**Within those steps** the two may part again: the engine's arithmetic is one fixed function at
every step it runs, other weights a new difference at each step (each step's update, or the
lag since a reload growing). So the ids' shifts of the first half of the hot steps (in step
order) beyond the second half's (``stats/step_ids.drift_within``: ``token_shift``'s drift,
taken inside the steps) carrying ``WITHIN_DRIFT`` of the first half's variance or more name the
weights too, whatever the run's share. Measured on the faults from the middle step of three
TinyLM draws (seeds 29, 41, 53), of the Llama pre-trained 90 iterations, of the fully trained
Llama and of the GPT-NeoX member (``family.py --restart``), and the sample data: the arithmetic
0.00-3.77%
(faulty split-KV kernels 0.00-0.88%, ``spiky-6`` 0.88%, fp8 KV caches 0.00-0.86% on the TinyLM
and the trained members but 3.77% on the barely trained Llama, whose weights change much from step
to step and the cache's rounding of each id with them; a bf16 lm_head accumulator 0.18-0.21%,
batch-variant split-K 0.00-0.28%, that kernel beside an fp8 cache 0.00-1.24%); the weights
0.78-29%: on the TinyLM 3.2-29% (a reload at mid-run 4.0-7.7%, beside top-p 6.1-6.7%, a lag
from a restart 10-15%, the lm_head a checkpoint behind from a restart 26-29%, fp8 weights loaded
at a restart 3.2-4.8%), on the Llama-90 15-21%, on the trained Llama and GPT-NeoX 0.78-2.78%
(their updates from step to step alike: the Llama's stale weights' halves correlated 0.60). The two overlap across models,
so the sign is set above every arithmetic measured (5%, 1.3x the barely trained Llama's fp8
cache): it names the weights where their difference changes fast (seed 29's reload at mid-run,
0.57% over the run, under ``ID_WEIGHTS``, drifts 7.7% within its steps), and leaves the run's
share to decide elsewhere, as before it. A reload beside an fp8 KV cache at every step drifts
1.3% (the cache's noise dilutes it): it stays the arithmetic."""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.analysis.diagnose.causes import code_path, policy, semantics
from mismatchctl.analysis.diagnose.causes.hypothesis import CauseModule
from mismatchctl.analysis.diagnose.causes.processor import DEFICIT_PER_K3, DEFICIT_Z
from mismatchctl.analysis.diagnose.check import evidence_of
from mismatchctl.analysis.diagnose.checks import token_shift
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.analysis.diagnose.contrasts import hotter
from mismatchctl.analysis.diagnose.levels import LEVEL
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.engines import plan as K
from mismatchctl.stats.localize.explain import contrast_within
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.mean_ratio import MeanRatio, mean_ratio
from mismatchctl.stats.sign_coherence import in_steps
from mismatchctl.stats.step_ids import ShiftBeyond, drift_within, shift_beyond

WITHIN = {
    K.TURN_KIND: "turn kinds",
    K.TURN: "turns",
    K.KV_POSITION: "KV ranges",
    K.TURN_POSITION: "ranges of positions in the turn",
    K.LENGTH: "response lengths",
    K.DUMP_ORDER: "engine batches",
    K.BATCH_SIZE: "batch sizes",
    K.GPU: "gpus",
}
"""The dimensions that cut a step's tokens into parts a code path could take (within the
responses) or a step's responses into parts a path or a replica could serve (lengths, engine
batches, gpus), and what the user reads of each."""


ID_WEIGHTS = token_shift.T.ID_WEIGHTS
"""Each token id's own shift carrying this share of ``r``'s variance or more (0.6%): other
weights (the module's docstring)."""

WITHIN_DRIFT = 0.05
"""The ids' shifts of the first half of the hot steps beyond the second half's carrying this
share of the first half's variance or more: other weights, whose difference changes from step to
step (the module's docstring: the arithmetic 3.77% at most on four models, the weights 0.78% to
29%, so only above every arithmetic measured)."""


@dataclass(frozen=True)
class StepChange:
    """The cause of the change at the steps, its variant and the sentence that says why."""

    cause: CauseModule
    variant: str
    because: str


def step_change(ctx: Context, region: dict[str, list[int]]) -> StepChange:
    """What changed at the steps of ``region`` (cube codes of the step dimension)."""
    steps = step_labels(ctx, region)
    removed = _removed(ctx, steps) if steps else None
    if removed is not None:
        inside, rest = removed
        return StepChange(
            semantics,
            semantics.AT_STEPS,
            f"their mean ratio exp(r) is {1 - inside.deficit:.4g}, {inside.z:.0f} standard "
            f"errors under 1 and {inside.per_k3:.2g}x their K3 per token, where the other "
            f"steps' is {1 - rest.deficit:.4g} (z {rest.z:.1f}): mass removed on the rollout "
            "side from those steps on, as a truncation or a logit processor turned on there "
            "removes it",
        )
    e = evidence_of(ctx.result(token_shift), token_shift.Evidence)
    share = None if e is None else e.id_share
    beyond = shift_beyond(ctx.state.step_ids, steps) if steps else None
    within = drift_within(ctx.state.step_ids, steps) if len(steps) >= 2 else None
    moved = share is not None and share >= ID_WEIGHTS
    shown = "n/a" if share is None else f"{100 * share:.2f}%"
    if moved and (beyond is None or beyond.beyond >= ID_WEIGHTS):
        return StepChange(
            policy,
            policy.AT_STEPS,
            f"each token id's own shift carries {shown} of r's variance "
            f"({ID_WEIGHTS:.1%} or more){_beyond_text(beyond)}{_within_text(within)}: "
            "other weights move some ids' logits on their own, noise moves none",
        )
    if within is not None and within.beyond >= WITHIN_DRIFT:
        return StepChange(
            policy,
            policy.AT_STEPS,
            f"each token id's own shift carries {shown} of r's variance{_beyond_text(beyond)}, "
            f"and the shifts drift within those steps: the first half of them beyond the second "
            f"half, {pct(within.beyond)} of its variance ({WITHIN_DRIFT:.1%} or more; the "
            f"halves' shifts correlated {within.correlation:.2f}): the engine's arithmetic "
            "moves the same ids alike at every step it runs, other weights move them anew as "
            "the training goes",
        )
    if moved:
        return StepChange(
            code_path,
            code_path.PLACES[K.STEP],
            f"each token id's own shift carries {shown} of r's variance, but the ids move "
            f"there as at the other steps{_beyond_text(beyond)}, under {ID_WEIGHTS:.1%}"
            f"{_within_text(within)}: what "
            "moves them is at every step (a template, a logit processor, a checkpoint every "
            "step shares), not what changed at these; every token of the steps noisier alike, "
            "as the engine's arithmetic changed at a step makes it",
        )
    return StepChange(
        code_path,
        code_path.PLACES[K.STEP],
        f"each token id's own shift carries {shown} of r's variance (under {ID_WEIGHTS:.1%})"
        f"{_within_text(within)} and no mass is removed: every token noisier alike, no id "
        "moved on its own, as the "
        "engine's arithmetic changed at a step makes it (a kernel every token takes, a restart "
        "with another precision)",
    )


def _beyond_text(beyond: ShiftBeyond | None) -> str:
    if beyond is None:
        return ""
    return (
        f"; beyond the same ids' shift at the other steps, {pct(beyond.beyond)} of the steps' "
        f"variance (their shifts' correlation {beyond.correlation:.2f}, {beyond.ids} ids)"
    )


def _within_text(within: ShiftBeyond | None) -> str:
    if within is None:
        return ""
    if within.beyond >= WITHIN_DRIFT:
        return f"; drifting within the steps too, {pct(within.beyond)} of the first half's variance"
    return (
        f"; drifting within the steps {pct(within.beyond)} of the first half's variance (under "
        f"the {WITHIN_DRIFT:.1%} that names other weights by itself)"
    )


def placed(ctx: Context, region: dict[str, list[int]]) -> str | None:
    """None when, within ``region`` (the steps), a value of one of the ``WITHIN`` dimensions is
    hotter than the others there at the same token probabilities; else what was tested ("2 turn
    kinds, 3 turns, 4 KV ranges, ..."). None too when nothing could be tested."""
    cube = ctx.cube
    assert cube is not None
    spec = cube.spec
    names = {d.name for d in spec.dims}
    tables = SideTables(cube)  # one build for every contrast below
    tested = []
    for dim in WITHIN:
        if dim not in names:
            continue
        d = spec.index(dim)
        found = [
            contrast_within(cube, region, dim, [c], K.BIN, LEVEL, tables)
            for c in range(spec.levels(d))
        ]
        if any(hotter(f) for f in found):
            return None
        if n := sum(f is not None for f in found):
            tested.append(f"{n} {WITHIN[dim]}")
    return ", ".join(tested) or None


def weights_at(ctx: Context, region: dict[str, list[int]]) -> bool:
    """Whether the steps of ``region`` changed by their weights: hot throughout (``placed``)
    with token ids moved on their own (``step_change``); not when a part within them is hotter
    (a path) or nothing but noise moved there (the arithmetic)."""
    return placed(ctx, region) is not None and step_change(ctx, region).cause is policy


def step_labels(ctx: Context, region: dict[str, list[int]]) -> set[int]:
    """The step numbers of a region's step codes (empty when the labels are no numbers)."""
    cube = ctx.cube
    if cube is None or K.STEP not in region:
        return set()
    spec = cube.spec
    d = spec.index(K.STEP)
    labels = spec.dims[d].labels
    try:
        return {int(labels[int(c)]) for c in spec.codes_of(d, region[K.STEP])}
    except ValueError:
        return set()


def _removed(ctx: Context, steps: set[int]) -> tuple[MeanRatio, MeanRatio] | None:
    """The steps' mean ratio and the other steps', when the steps' lacks mass at the
    thresholds and the others' does not (a run's, the first that shows it)."""
    for state in ctx.state.hot_sequences.runs().values():
        others = {int(s) for s in set(state.step.tolist())} - steps
        inside, rest = mean_ratio(in_steps(state, steps)), mean_ratio(in_steps(state, others))
        if inside is None or rest is None:
            continue
        if _lacks(inside) and not _lacks(rest):
            return inside, rest
    return None


def _lacks(found: MeanRatio) -> bool:
    return found.z >= DEFICIT_Z and found.per_k3 >= DEFICIT_PER_K3


__all__ = [
    "ID_WEIGHTS",
    "WITHIN",
    "WITHIN_DRIFT",
    "StepChange",
    "placed",
    "step_change",
    "step_labels",
    "weights_at",
]
