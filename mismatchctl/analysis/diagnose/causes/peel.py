"""Peel the first cause, then look again: whether the named cause's fault sets off another's
checks (a relation of ``EXPLAINS``) is decided on what is left once the first cause's effect is
taken out, where the data let it be taken out, and stays the declared relation where not.

A relation is lifted only when the second cause's evidence survives the peel, each on its own
check's thresholds (none lowered):

- **a code path explains a policy's lean** (a biased kernel leans the responses it hits) only
  when no response leans outside the path's part: the second pass's outside (``outside.py``:
  the other gpus or steps, the first turns beside a part of the later turns) with the
  ``policy_signs`` thresholds. Responses that lean where the path does not reach are the
  policy's own;
- **a policy explains a part** only when the part is made of whole responses (some steps, gpus,
  lengths, sources: a lag that differs from step to step, or one replica's weights), which is
  where a policy's own variation shows: ``pol-stale-ckpt``, a checkpoint behind, has steps 1-2
  at 2.0x the others. Other weights apply to every position of a response alike at the same
  token probabilities, so a part within the responses (some turns, KV positions, positions in
  the turn), hotter than the rest at the same probabilities, is no part of the policy: the
  contrast of the part against the rest at the same token mix is the peel of a cause of every
  token. The corpus' ten runs on other weights (stale, partial, reloaded at a step, a wrong
  checkpoint, fp8 weights or lm_head), alone and against ``h-b``, alarm on no part within the
  responses: only on steps (``pol-stale-ckpt``, ``pol-reload-jump``).

- **the semantics explains a lean** except where a truncation cannot reach: a truncation
  renormalised on the rollout side (top-p, top-k, min-p), or a one-sided shift with the
  rollout side higher (``semantics.lowers``), lowers ``r`` on every kept token and moves none
  above the healthy noise, so the responses' lean counted on
  the tokens with ``r`` above ``TAIL_RATIO`` of their ``|lr|`` (``policy.lean_above_truncation``,
  at the ``policy_signs`` thresholds) is another policy's: ``combo-topp-stale`` (top-p beside a
  checkpoint behind) 1.77 there, the corpus' truncations alone 0.81-1.41. The policy is then
  named beside the semantics even where the sign test on the whole run does not alarm (the
  truncation's shift below zero leaves it few signs: 1.37). A temperature or a logit processor
  moves ``r`` both ways: the relation holds.

- **the semantics explains the precision**, not the other way round: a precision loss moves
  each token on its own, whatever its logprob, so beside it a temperature's line keeps its
  slope and loses its share of ``r``'s variance (``combo-temp-fp8kv``, 0.91 against 0.9 beside
  an fp8 KV cache: slope 0.9946 as ``sem-temp-subtle``'s 0.9937 alone, 2.5% of the variance
  under the ``temperature`` check's 5%). With the precision named over a baseline (no response
  leaning), a slope at least that check's 0.003 from 1 at ``semantics.LINE_T`` standard errors
  over the responses is named beside it (``semantics.beside_noise``).

A relation the modules do not declare, and that holds only where the data show it:

- **the hardware explains a code path whose part lies on its gpu**: when, within the path's
  part, one gpu is hotter than the others at the same token probabilities
  (``parts.path_on_one_gpu``) and on the other gpus the part is no hotter than the rest, the
  hardware is named from that very part (a kernel path only
  that gpu generation takes, ``hardware.support``), and the code path is its finding without
  the gpu: no second cause (``hw-l20-splitkv-subtle`` of the held-out corpus over its baseline,
  the part 5.4x the rest and gpu L20 6.2x the others within it). A part hot on every gpu
  (spikes beside a gpu hot everywhere) stands beside the hardware on its own share. Some
  steps that stand out (the ``regimes`` or ``spikes`` check) beside a gpu named are that
  gpu's when on the other gpus those steps are no hotter than the others (``steps_of_gpu``):
  a kernel fault that hits only some batch shapes varies with the batches its gpu served
  (one device's split-KV merge a key late, "A fault's size, swept": steps 1-5 at 5.1-16x
  step 6, every one of them on that gpu);
- **the semantics named from a code path's part keeps the path's relations**: a part whose
  excess is mass removed on one side (``processor.py``, ``semantics.by_part``) is the same
  part whatever made it hot, so what it sets off (the burst at the turns' starts the template
  reads, the turns' last tokens) it sets off for the semantics too (``sem-badwords-subtle``:
  the first 8 tokens after a tool response 7.3x, inside its first 16 of each turn);
- **the precision named over a baseline explains a code path whose part stands at its level**
  (``level_shape``): over the baseline, the part no hotter than the rest at the ``baseline``
  check's thresholds (``beyond_level``). A loss growing with the context makes long-KV parts
  hot on the run's own noise model, not over the baseline's.

What the data cannot peel keeps the declared relation (the cause modules say why: a temperature
or a logit processor beside a policy, which move ``r`` both ways; the semantics named first
beside a precision loss, whose transform leaves tens of times a baseline's K3 about its line; a
routing flip beside a precision loss without a baseline whose routes give the tokens before any
flip: ``outside.py``)."""

from __future__ import annotations

import numpy as np

from mismatchctl.analysis.diagnose.cause_evidence import steps_follow_gpu
from mismatchctl.analysis.diagnose.causes import code_path, hardware, policy, semantics
from mismatchctl.analysis.diagnose.causes.beside_truncation import (
    lean_beside_truncation,
    steps_beside_truncation,
    tail_beside,
    tail_text,
)
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.causes.outside import hotter, lean, outside
from mismatchctl.analysis.diagnose.causes.parts import (
    hot_on_other_gpus,
    path_on_one_gpu,
    where_text,
)
from mismatchctl.analysis.diagnose.check import FAIL, WARN, fired
from mismatchctl.analysis.diagnose.checks import regimes, spikes
from mismatchctl.analysis.diagnose.context import Context
from mismatchctl.engines import plan as K
from mismatchctl.stats.hot_sequences import K3_SUM, N_ALL
from mismatchctl.stats.localize.explain import contrast_baseline

WITHIN_RESPONSES = K.SEGMENT_KEYS
"""The keys that cut a response into parts (turns, positions, probability bins): a region
holding one of them is a part within the responses, whatever whole-response dimensions (a
length, a step) it is conjoined with."""

POLICY, CODE_PATH, SEMANTICS, PRECISION = policy.KEY, "code_path", semantics.KEY, "precision"
TEMPLATE = "template"

LATER_OVER_FIRST = 1.75
"""The later turns of the gpus outside a gpu named first, over their first turns at the same
token probabilities (the ``tool_responses`` check's ``TOOL_RATIO_WARN``), under which a burst
after the tool responses is that gpu's. A re-rendered template raises the later turns of every
gpu: every template fault of seven corpora (30 runs, alone) puts them at 14-2,267x the first
turns there (intervals from 11), every healthy run and improvement (107) at 0.77-1.2x."""


def explains(ctx: Context, first: Weighed, w: Weighed) -> bool:
    """Whether one of the two causes' faults sets off the other's checks: the declared relation
    (``EXPLAINS``, either way), less what the peel separates; a code path whose part one gpu
    holds is the hardware's finding."""
    pair = {first.cause.KEY: first, w.cause.KEY: w}
    if set(pair) == {hardware.KEY, CODE_PATH}:
        return _held(ctx, pair[CODE_PATH]) or steps_of_gpu(ctx, pair[CODE_PATH])
    if set(pair) == {hardware.KEY, TEMPLATE}:  # the burst of a gpu named first
        return first.cause.KEY == hardware.KEY and burst_of_gpu(ctx, first)
    if level_shape(ctx, first, w):
        return True
    declared = w.cause.KEY in first.cause.EXPLAINS or first.cause.KEY in w.cause.EXPLAINS
    declared = declared or in_part(first, w)
    if not declared:
        return False
    if set(pair) == {POLICY, CODE_PATH}:
        return not _both_stand(ctx, pair[POLICY], pair[CODE_PATH])
    if set(pair) == {POLICY, SEMANTICS}:
        return not _above_truncation(ctx, pair[SEMANTICS])
    return True


def level_shape(ctx: Context, first: Weighed, w: Weighed) -> bool:
    """A code path beside the precision named over a baseline whose part is no hotter than the
    level of the rest there (not ``beyond_level``): the level's own shape. A loss that grows
    with the context (an fp8 KV cache: every key read adds its rounding) makes long-KV
    positions hotter than the rest on the run's own noise model (the GPT-NeoX member's: KV
    32-127 at 2.0x the rest, 80% of the K3 on 67% of the tokens), but over the baseline that
    part is 36.9x and the rest 27.8x (1.33x). A window's part stands beyond it
    (``combo-window-fp8kv``, named by ``outside.level_over_part``)."""
    pair = {first.cause.KEY: first, w.cause.KEY: w}
    if set(pair) != {PRECISION, CODE_PATH} or first.cause.KEY != PRECISION:
        return False
    return not beyond_level(ctx, pair[CODE_PATH])


def beyond_level(ctx: Context, path: Weighed) -> bool:
    """A code path's part over the baseline stands beyond the level of the rest: the part's
    rate over the baseline's at the same token mix the ``baseline`` check's 1.5x the rest's
    (the interval above 1.2, the two halves' errors independent); without a baseline, or a
    part the cube cannot cut in one dimension, the path stands (as before the relation)."""
    view, cube, region = ctx.baseline, ctx.cube, path.support.region or {}
    if view is None or view.cube is None or cube is None or len(region) != 1:
        return True
    (dim, codes), spec = next(iter(region.items())), cube.spec
    rest = [c for c in range(spec.levels(spec.index(dim))) if c not in codes]
    part = contrast_baseline(cube, view.cube, region, K.BIN)
    other = contrast_baseline(cube, view.cube, {dim: rest}, K.BIN) if rest else None
    if part is None or other is None:
        return True
    return hotter(part, other)


def in_part(first: Weighed, w: Weighed) -> bool:
    """The semantics named from a code path's part (``semantics.by_part``: its region is that
    part) keeps the path's relations: what the part's excess sets off (a burst at the turns'
    starts, the turns' last tokens) it sets off whatever made the part hot."""
    pair = {first.cause.KEY: first, w.cause.KEY: w}
    sem = pair.get(SEMANTICS)
    if sem is None or not sem.support.region or len(pair) < 2:
        return False
    other = next(key for key in pair if key != SEMANTICS)
    return other in code_path.EXPLAINS


def peeled(ctx: Context, first: Weighed, weighed: list[Weighed]) -> list[Weighed]:
    """The causes the first cause's peel finds standing though their own checks on the whole
    run do not alarm: the policy's lean above a truncation's reach (``_above_truncation``), a
    temperature's line under a precision loss's noise (``_line``). An alarmed policy is
    weighed as any second cause, with the relation lifted (``explains``)."""
    if first.cause.KEY == PRECISION:
        return _line(ctx, first, weighed)
    found = next((w for w in weighed if w.cause.KEY == POLICY), None)
    if first.cause.KEY != SEMANTICS or found is None or found.support.alarm:
        return []
    if not semantics.lowers(ctx, first.support):
        return []
    lean = lean_above(ctx) or lean_beside_truncation(ctx) or steps_beside_truncation(ctx)
    return [] if lean is None else [Weighed(found.cause, lean, 0.0)]


def truncation_tail(ctx: Context, first: Weighed | None) -> str | None:
    """Why the policy or the precision is not named beside a truncation whose tail is filled
    (``beside_truncation.tail_text``); None when the first is no truncation or its tail holds
    nothing of another cause."""
    if first is None or first.cause.KEY != SEMANTICS or not semantics.lowers(ctx, first.support):
        return None
    return tail_text(ctx)


def _line(ctx: Context, first: Weighed, weighed: list[Weighed]) -> list[Weighed]:
    """Beside a precision loss named over a baseline (no response leaning, no semantic sign on
    the whole run), the temperature's line told by its slope's scatter between responses
    (``semantics.beside_noise``)."""
    found = next((w for w in weighed if w.cause.KEY == SEMANTICS), None)
    if found is None or found.support.alarm or first.support.against or ctx.baseline is None:
        return []
    line = semantics.beside_noise(ctx)
    return [] if line is None else [Weighed(found.cause, line, 0.0)]


def _above_truncation(ctx: Context, found: Weighed) -> bool:
    """The semantics only lowers ``r`` and the responses lean above its reach."""
    if not semantics.lowers(ctx, found.support):
        return False
    return lean_above(ctx) is not None


def lean_above(ctx: Context) -> Support | None:
    """The responses' lean above a truncation's reach (``policy.lean_above_truncation``), but
    over a baseline only where the tail there is filled (``beside_truncation.tail_beside``):
    another cause is then shown to be there. A truncation alone leaves the tail at 0-1.2x the
    baseline's K3 and, on the corpora's models, leans 0.81-1.41 above its reach; the second
    Gemma2 draw's top-p 0.9 leans 1.69 there (p 7e-9) with its tail unfilled over its baseline,
    where every truncation beside other weights of every corpus fills it 2-3900x. Without a
    baseline's per-sequence sums the lean stands alone."""
    lean = policy.lean_above_truncation(ctx)
    view = ctx.baseline
    if lean is None or view is None or view.sequences is None:
        return lean
    return lean if tail_beside(ctx) is not None else None


def _held(ctx: Context, path: Weighed) -> bool:
    """The code path's part is the one a gpu holds (``parts.path_on_one_gpu``: the localized
    finding in which one gpu is hotter than the others) and on the other gpus it is no hotter
    than the rest; a part hot on every gpu (spikes beside a gpu hot everywhere) is not."""
    held = path_on_one_gpu(ctx)
    if held is None or path.support.where != where_text(held[1]["where"]):
        return False
    return not hot_on_other_gpus(held[1])


def burst_of_gpu(ctx: Context, gpu: Weighed) -> bool:
    """The burst after the tool responses (``template``) beside a gpu named first is the gpu's:
    outside it the later turns are under ``LATER_OVER_FIRST`` times the first turns at the
    same token probabilities (``hot_sequences``' cells: turn kind x probability bin). One device
    of four splitting KV a key late past 96 keys (the Gemma2 member's ``s-gpu-splitdrop-96``,
    ``family.py --sweep --seed 3``): the first 8 tokens after a tool response 4.1x the rest of
    those turns (95% CI 1.7-10), a decode step right after a tool response's prefill attending
    most to the keys just written, where a merge a key late errs most; a template was named
    beside the hardware. False without an outside of gpus or without first-turn tokens."""
    out = outside(ctx, gpu)
    spec = ctx.cube.spec if ctx.cube is not None else None
    if out is None or spec is None or not (gpu.support.region or {}).get(K.GPU):
        return False
    bins = spec.dims[spec.index(K.BIN)].size
    n, k3 = np.zeros(2 * bins), np.zeros(2 * bins)
    for state in ctx.state.hot_sequences.runs().values():
        st = out.restrict(state)
        keep = st.cell < 2 * bins
        n += np.bincount(st.cell[keep], st.sums[keep, N_ALL], 2 * bins)
        k3 += np.bincount(st.cell[keep], st.sums[keep, K3_SUM], 2 * bins)
    first_n, first_k3, later_n, later_k3 = n[:bins], k3[:bins], n[bins:], k3[bins:]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(first_n > 0, first_k3 / first_n, np.nan)
    use = np.isfinite(rate) & (later_n > 0)
    expected = float(np.sum(later_n[use] * rate[use]))
    if not use.any() or expected <= 0:
        return False
    return float(np.sum(later_k3[use])) / expected < LATER_OVER_FIRST


def steps_of_gpu(ctx: Context, path: Weighed) -> bool:
    """A code path of some steps (the ``spikes`` or ``regimes`` check) beside the hardware
    named, whose steps are the hot gpu's: on the other gpus together they are no hotter than
    the others (``cause_evidence.steps_follow_gpu``, which the path's own support says
    against it)."""
    if set(path.support.region or {}) != {K.STEP}:
        return False
    hits = [c for c in (ctx.result(spikes), ctx.result(regimes)) if fired(c) and c is not None]
    return bool(hits) and steps_follow_gpu(ctx, hits)


def path_over_lean(ctx: Context, first: Weighed, alarmed: list[Weighed]) -> Weighed | None:
    """The code path that explains the lean a policy was named for: the path's part lies within
    the responses and no response leans outside it (``outside.lean`` on the ``policy_signs``
    thresholds), so the responses that lean are the part's, as a biased kernel leans those it
    hits; the path is then the named cause (``combo-window-fp8kv``, a sliding window at long KV
    beside an fp8 KV cache: the later turns at KV 128-255 hold 43% of the excess, the first
    turns do not lean). Other weights lean the responses outside any part too: the corpus's ten
    policy runs alarm on no part within the responses, and a part beside them keeps its own
    share (``_both_stand``). None when the first is no policy or no such path alarms."""
    if first.cause.KEY != POLICY:
        return None
    path = next((w for w in alarmed if w.cause.KEY == CODE_PATH), None)
    if path is None or not path.support.region:
        return None
    if not any(d in path.support.region for d in WITHIN_RESPONSES):
        return None
    out = outside(ctx, path)
    return path if out is not None and lean(ctx, out) is None else None


def level_leans(
    ctx: Context, first: Weighed, also: list[Weighed], weighed: list[Weighed]
) -> Weighed | None:
    """The policy for the precision named first over a baseline when a code path stands beside
    it and the responses lean outside the path's part (the path's part within the responses,
    ``outside.lean`` at the ``policy_signs`` thresholds): the precision's signature is a level
    with no response leaning, and where no part reaches they do, so the level is other
    weights'. The whole run's sign test misses such a lean when the path's part, hot and not
    leaning, dilutes it (``combo-stale-splitkv-subtle-mid``, weights one step behind beside a
    split-KV path: over ``h-mid-a`` the part holds 26% of the excess, the first turns lean
    1.68, p 4.9e-8). None otherwise."""
    if first.cause.KEY != PRECISION:
        return None
    path = next((w for w in also if w.cause.KEY == CODE_PATH), None)
    found = next((w for w in weighed if w.cause.KEY == POLICY), None)
    if path is None or found is None or not path.support.region:
        return None
    if not any(d in path.support.region for d in WITHIN_RESPONSES):
        return None
    out = outside(ctx, path)
    leans = lean(ctx, out) if out is not None else None
    if leans is None:
        return None
    verdict = max(leans.verdict, first.support.verdict, key=(WARN, FAIL).index)
    support = Support(
        **{
            **leans.__dict__,
            "share": first.support.share,
            "where": "every token",
            "verdict": verdict,
        }
    )
    return Weighed(found.cause, support, first.score)


def beside_lean(ctx: Context, first: Weighed, w: Weighed) -> bool:
    """A code path beside the policy named first, both standing on their own checks
    (``_both_stand``: the path's part within the responses alarms, and the responses lean
    outside it): a second cause whatever its share, as the second pass names a policy outside
    a part (``outside.py``). ``combo-stale-splitkv-subtle``, a split-KV path beside weights one
    step behind: the part at KV 128-255 of the later turns is 2.6x the rest and holds 24% of the
    excess, under ``ALSO_SHARE``; the corpus's policy runs alarm on no part within the
    responses."""
    pair = {first.cause.KEY: first, w.cause.KEY: w}
    if first.cause.KEY != POLICY or set(pair) != {POLICY, CODE_PATH}:
        return False
    return _both_stand(ctx, first, w)


def gpu_beside_level(ctx: Context, first: Weighed, w: Weighed) -> bool:
    """One gpu (or node) beside a cause of every token named first, the ``hardware`` check
    alarming on its own test (the same responses dealt to the gpus at random within each run
    and step split as far in under 1% of its draws, at the same token probabilities): a second
    cause whatever its share, as a path beside a policy (:func:`beside_lean`). A cause of every
    token raises every gpu alike; the test holds the responses' own spread. The Cohere member's
    ``f-combo-temp-gpu`` (a temperature of 0.97 against 1.0 beside one device of four with an
    fp8 KV cache): gpu2 1.9x the others (95% CI 1.7-2.1), 17% of the excess, under
    ``ALSO_SHARE``; of the 954 diagnoses of six corpora it is the only one where the hardware
    alarmed and was not named."""
    if not first.cause.EVERY_TOKEN or w.cause.KEY != hardware.KEY or not w.support.alarm:
        return False
    return hardware.own_test(ctx)


def _both_stand(ctx: Context, policy: Weighed, path: Weighed) -> bool:
    """A policy and a code path stand side by side: the path's part lies within the responses
    (no part of the policy) and the responses lean outside it (no lean of the path)."""
    region = path.support.region
    if not policy.support.alarm or not path.support.alarm or not region:
        return False
    if not any(d in region for d in WITHIN_RESPONSES):
        return False
    out = outside(ctx, path)
    return out is not None and lean(ctx, out) is not None


__all__ = [
    "WITHIN_RESPONSES",
    "beside_lean",
    "burst_of_gpu",
    "explains",
    "gpu_beside_level",
    "in_part",
    "lean_above",
    "level_leans",
    "level_shape",
    "path_over_lean",
    "peeled",
    "truncation_tail",
]
