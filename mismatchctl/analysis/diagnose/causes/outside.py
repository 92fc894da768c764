"""The second pass: when the named cause is a part of the run (one gpu, the tokens of a code
path, some steps, the turns after tool responses), a louder fault there can hide a second one
everywhere. The causes of every token are tested again on the tokens *outside* that part, each
with its own check's thresholds (none lowered): a temperature's line (``temperature``:
``semantics.line_outside``), whose lean and level there are its own, so it is weighed first;
the policy's lean (``policy_signs``) on the
sequences of the other gpus or steps, or on the other turns' tokens; the precision's excess over
the baseline (``baseline``) on the tokens outside the part at the same token mix, where it does
not grow with the KV position (``_grows``); a gpu, when the ``hardware`` check is quiet on the
whole run, on that check's own tests there (``hardware.outside_part``: a louder part raises
every gpu). A cause that stands there is named beside the first,
whatever its share of the whole run's mass (the louder fault's part holds most of that). The
outside of MoE routing flips is the tokens before any flip in their response, which the cube
does not cut: the precision there is ``precision.beside_flips``, against the baseline's same
tokens."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mismatchctl.analysis.diagnose.causes import hardware, precision, semantics, sequences
from mismatchctl.analysis.diagnose.causes.hypothesis import Support, Weighed
from mismatchctl.analysis.diagnose.check import FAIL, OK, evidence_of
from mismatchctl.analysis.diagnose.checks import baseline, policy_signs
from mismatchctl.analysis.diagnose.context import Context, baseline_on_other_gpus
from mismatchctl.analysis.diagnose.contrasts import ci_text, relative
from mismatchctl.analysis.diagnose.text import pct
from mismatchctl.engines import plan as K
from mismatchctl.stats.hot_sequences import HotSequenceState
from mismatchctl.stats.localize.explain import contrast_baseline
from mismatchctl.stats.localize.regions import region_sums
from mismatchctl.stats.localize.result import ratio_text
from mismatchctl.stats.localize.tables import SideTables
from mismatchctl.stats.sign_coherence import in_cells, in_steps, off_gpus, sign_coherence

ROUTING = "routing"  # its part: the tokens after a flipped route

TURN_PARTS = ("template", "tool_turns")
"""Causes whose part is the turns after tool responses (their outside: the first turns)."""

FIRST_TURN_MASS = 0.05
"""A part whose tokens carry less than this share of their K3 mass in the first turns lies in
the later turns (a long-KV path is one): the first turns are outside it."""

Restrict = Callable[[HotSequenceState], HotSequenceState]


@dataclass(frozen=True)
class Outside:
    """The tokens outside the named cause's part: ``region`` (cube dimension -> search-level
    codes) for the baseline contrast, ``restrict`` the sign test's sequences or cells there,
    ``text`` what the user reads ("the other gpus than L20")."""

    region: dict[str, list[int]]
    restrict: Restrict
    text: str
    precision: bool = True
    part: dict[str, list[int]] = field(default_factory=dict)
    """The named part of the later or the first turns, whose KV positions the precision's
    outside stops before (``_below``); empty for a gpu's or some steps' outside."""
    """Whether a precision loss is weighed there; not outside a part of some steps. A cause
    that varies from step to step leaves the other steps above the baseline too: the corpora's
    parts of steps are stale weights whose lag differs in size from step to step
    (``combo-stale-splitkv*``: its hot steps 76-106x the others, which still stand 5.2x over the
    baseline), and a path that some batches of every step take would do the same. There the
    lean that would name the policy reads the other steps' responses only (32-128 in the
    corpora), too few to call "no lean" on the models whose lag leans faintly: the excess was
    read as a precision loss beside the path in every draw (four runs
    of both machines' corpora and of seeds 13 and 29), where none was planted, and no run of
    the corpora had one rightly named there. The policy is still named outside the steps where
    its lean stands (``combo-stale-splitkv-deep``)."""


def second_pass(ctx: Context, first: Weighed, weighed: list[Weighed]) -> list[Weighed]:
    """The causes of every token that stand on their own outside the first cause's part."""
    if first.cause.EVERY_TOKEN or not first.support.alarm:
        return []
    if first.cause.KEY == ROUTING:
        return _beside_flips(ctx, _cause(weighed, precision.KEY))
    out = outside(ctx, first)
    if out is None:
        return []
    found = []
    transform = _cause(weighed, semantics.KEY)
    line = None if transform is None else semantics.line_outside(ctx, out.restrict, out.text)
    if line is None and transform is not None:  # a truncation's signs are its own there
        line = semantics.truncation_outside(ctx, out.restrict, out.text)
    if line is not None:  # a temperature's: the lean and the level there are its own
        return [w for w in [Weighed(transform.cause, _shared(ctx, out, line), 0.0)]
                if _apart(first, w)]  # fmt: skip
    found_lean = lean(ctx, out)
    policy, loss = _cause(weighed, "policy"), _cause(weighed, precision.KEY)
    requests = _cause(weighed, sequences.KEY)
    some = None if found_lean is None else sequences.requests_outside(ctx, out.restrict, out.text)
    if some is not None and requests is not None:  # the lean is some requests' (a setting)
        found.append(Weighed(requests.cause, _shared(ctx, out, some), 0.0))
    elif found_lean is not None and policy is not None:
        found.append(Weighed(policy.cause, _shared(ctx, out, found_lean), 0.0))
    excess = None
    near = _below(ctx.cube.spec, out.part, out) if out.part and ctx.cube is not None else out
    if out.precision:
        excess = _excess(ctx, near, found_lean is not None or _leans_faintly(ctx, out))
    if excess is not None and loss is not None and not _other_reasons(loss):
        found.append(Weighed(loss.cause, _shared(ctx, near, excess), 0.0))
    gpu = _cause(weighed, hardware.KEY)
    if gpu is not None and not gpu.support.alarm and K.GPU not in out.region:
        device = hardware.outside_part(ctx, out.region, out.restrict, out.text)
        if device is not None:
            found.append(Weighed(gpu.cause, _shared(ctx, out, device), 0.0))
    return [w for w in found if _apart(first, w)]


LEVEL_SHARE = 0.5
"""The level outside a part named first (a precision loss found there by the second pass)
holds this share of the excess or more when every token of the run carries it: ``(rho_out -
1) / (rho - 1)``, ``rho_out`` the outside's ratio to the baseline and ``rho`` the run's. The
part then holds under half of the excess beyond that level: the level is named first and the
part beside it where it stands on its own beyond it (``level_over_part``), as the ``baseline``
check counts a part beyond the rest's level (``own_share``). Over the corpora's baselines the
parts named first beside such a level hold it at 0.08-0.49 of the excess (a template, a gpu, a
window's long KV: ``combo-window-fp8kv`` 0.43-0.51); 16 of an fp8 KV cache's responses of 680
tokens over 16 healthy ones put the first turns at 14x the baseline in a run 22x it (0.62), the
later turns 1.8x the first."""


def level_over_part(
    ctx: Context, first: Weighed, also: list[Weighed], cut: float
) -> tuple[Weighed, list[Weighed]]:
    """The first cause and the second ones, the precision found outside the first's part put
    first when its level holds ``LEVEL_SHARE`` of the excess; the part stays beside it when it
    is no finding of the precision's (its ``EXPLAINS``) and what it holds beyond the level,
    ``(rho - rho_out) / rho`` of the run's mass, reaches ``cut``. Not beside MoE routing flips,
    whose outside (the tokens before any flip) is not at the run's token mix."""
    level = next((w for w in also if w.cause.KEY == precision.KEY), None)
    e = evidence_of(ctx.result(baseline), baseline.Evidence)
    rho = e.rate_ratio if e is not None else None
    if first.cause.EVERY_TOKEN or first.cause.KEY == ROUTING or level is None:
        return first, also
    out = level.support.ratio
    if out is None or rho is None or not rho > out > 1 or (out - 1) / (rho - 1) < LEVEL_SHARE:
        return first, also
    held, beyond = (out - 1) / (rho - 1), (rho - out) / rho
    ci = level.support.ci
    because = (
        f"in {level.support.where}, outside {first.cause.LABEL}: {ratio_text(out)}x the "
        f"baseline's rate at the same token mix ({ci_text(ci)}), no response leaning there; at "
        f"that level every token holds {pct(held)} of the excess over the baseline, "
        f"{first.cause.LABEL} {pct(1 - held)} beyond it"
    )
    found = {
        "share": (out - 1) / rho, "where": "every token", "because": because,
        "variant": "an excess over the baseline on every token, a part hotter beside it",
    }  # fmt: skip
    named = Weighed(level.cause, Support(**{**level.support.__dict__, **found}), first.score)
    rest = [w for w in also if w is not level]
    if first.cause.KEY in level.cause.EXPLAINS or beyond < cut:
        return named, rest
    part = Weighed(first.cause, Support(**{**first.support.__dict__, "share": beyond}), 0.0)
    return named, [part, *rest]


def _apart(first: Weighed, w: Weighed) -> bool:
    """A second cause of another class than the first; some requests (of the code path class)
    stand beside any other cause's part, for their lean is no part's."""
    if w.cause.KEY == sequences.KEY:
        return first.cause.KEY != sequences.KEY
    return w.cause.CLASS != first.cause.CLASS


def _beside_flips(ctx: Context, loss: Weighed | None) -> list[Weighed]:
    """The precision on the tokens no flipped route reaches, where no evidence stands against
    it (responses leaning, the sides computing different distributions, other gpus)."""
    if loss is None or loss.support.against:
        return []
    found = precision.beside_flips(ctx)
    return [] if found is None else [Weighed(loss.cause, found, 0.0)]


def _other_reasons(loss: Weighed) -> bool:
    """Evidence against the precision that holds outside the part too: the sides compute
    different distributions, or the baseline ran on other gpus (the run's lean is the part's)."""
    return any(not a.startswith("whole responses lean") for a in loss.support.against)


def _shared(ctx: Context, out: Outside, found: Support) -> Support:
    """The Support with its share: the outside's share of the run's K3 mass (what a cause of
    every token there explains at most; small beside a loud part)."""
    cube = ctx.cube
    share = None
    if cube is not None and cube.k3_sum > 0:
        spec, t = cube.spec, SideTables(cube)
        masks = {
            spec.index(n): np.isin(np.arange(spec.levels(spec.index(n))), c)
            for n, c in out.region.items()
        }
        share = float(np.sum(region_sums(t, masks, None).a)) / float(cube.k3_sum)
    return Support(**{**found.__dict__, "share": share})


def _cause(weighed: list[Weighed], key: str) -> Weighed | None:
    return next((w for w in weighed if key == w.cause.KEY), None)


def requests_beside_part(ctx: Context, weighed: list[Weighed]) -> list[Weighed]:
    """The policy claims no share when, outside the best supported part of the run, the lean is
    some requests' (``sequences.requests_outside``): a setting or weights of some requests beside
    a fault of a part, which the second pass names (``second_pass``). Without a named part the
    same relation is ``policy._some_requests``."""
    found = _cause(weighed, "policy")
    parts = [w for w in weighed if w.support.alarm and not w.cause.EVERY_TOKEN
             and w.cause.KEY != sequences.KEY]  # fmt: skip
    if found is None or not found.support.alarm or not parts:
        return weighed
    out = outside(ctx, max(parts, key=lambda w: w.score))
    some = None if out is None else sequences.requests_outside(ctx, out.restrict, out.text)
    if out is None or some is None:
        return weighed
    against = (
        f"outside the named part, the responses that lean are some requests' ({some.where}): "
        "a setting or weights that only they carry, not other weights for every response",
    )
    support = Support(**{**found.support.__dict__, "share": 0.0,
                         "against": found.support.against + against})  # fmt: skip
    return [Weighed(w.cause, support, 0.0) if w is found else w for w in weighed]


def lean(ctx: Context, out: Outside) -> Support | None:
    """The policy's sign test on the sequences (or turns) outside the part, each run's at the
    ``policy_signs`` check's thresholds; the worst run's Support, None when none leans."""
    t = policy_signs.T
    best: tuple[str, Any] | None = None
    for state in ctx.state.hot_sequences.runs().values():
        found = sign_coherence(out.restrict(state))
        if found.tested == 0 or not found.p_value < t.SIGN_ALPHA:
            continue
        if found.dispersion >= t.SIGN_DISPERSION_WARN and (
            best is None or found.dispersion > best[1].dispersion
        ):
            verdict = FAIL if found.dispersion >= t.SIGN_DISPERSION_FAIL else "warn"
            best = (verdict, found)
    if best is None:
        return None
    verdict, found = best
    return Support(
        verdict=verdict,
        share=None,
        because=(
            f"outside the named part, in {out.text}: the count of tokens with r > 0 in each of "
            f"{found.tested} sequences spreads {found.dispersion:.2f}x as much as independent "
            f"signs give (chi-square p = {found.p_value:.2g}; {pct(found.extreme_share)} at "
            "|z| > 3): whole responses lean one way where the first cause does not reach"
        ),
        checks=(policy_signs.NAME,),
        where=out.text,
        variant="responses leaning one way outside the first cause's part",
    )


NO_LEAN_ALPHA = 1e-4
"""The precision outside a part needs its responses not to lean. Outside a part the sign test
at the ``policy_signs`` dispersion (1.5) with p under ``NO_LEAN_ALPHA`` is a lean too faint to
name the policy (its ``SIGN_ALPHA``, 1e-6) and too strong to call none: neither cause is named
there. The whole-run test of the healthy and improved runs reaches p 3e-4 (at 1.38); outside
the part of the runs of no planted policy (the corpus and the held-out one: 252 runs), the dispersion is at
most 1.46 (``combo-fp8kv-gpu-deep``, p 2.8e-4). ``combo-stale-gpu-mid``'s other gpus lean 1.60
(p 6.9e-6, 144 responses): read as no lean, a precision loss was named there beside the hardware
over its baseline, and the stale weights it holds were not."""


def _leans_faintly(ctx: Context, out: Outside) -> bool:
    """Whether any run's responses outside the part lean at ``NO_LEAN_ALPHA`` (and the
    ``policy_signs`` dispersion)."""
    t = policy_signs.T
    found = [sign_coherence(out.restrict(s)) for s in ctx.state.hot_sequences.runs().values()]
    return any(
        f.tested and f.p_value < NO_LEAN_ALPHA and f.dispersion >= t.SIGN_DISPERSION_WARN
        for f in found
    )


def _excess(ctx: Context, out: Outside, leans: bool) -> Support | None:
    """The excess over the baseline outside the part, at the ``baseline`` check's thresholds,
    where no response leans (else it is the policy's) and the baseline ran on the same gpus."""
    view = ctx.baseline
    if leans or view is None or view.cube is None or ctx.cube is None:
        return None
    if baseline_on_other_gpus(ctx) is not None:
        return None
    found = contrast_baseline(ctx.cube, view.cube, out.region, K.BIN)
    if found is None:
        return None
    ratio, ci = found
    t = baseline.T
    verdict = relative(ratio, ci, t.BASELINE_FACTOR, t.BASELINE_CI_LOW, t.BASELINE_FAIL)
    if verdict == OK or _grows(ctx, out) or _temperature(ctx, ratio):
        return None
    return Support(
        verdict=verdict,
        share=None,
        because=(
            f"outside the named part, in {out.text}: {ratio_text(ratio)}x the baseline's rate "
            f"at the same token mix ({ci_text(ci)}), no response leaning there"
        ),
        checks=(baseline.NAME,),
        ratio=ratio,
        ci=ci,
        where=out.text,
        variant="an excess over the baseline outside the first cause's part",
    )


def _temperature(ctx: Context, ratio: float) -> bool:
    """The ``baseline`` check read the run's excess as a lower sampling temperature's
    (``baseline.another_temperature``: uniform, the run sampling likelier tokens) and the
    outside stands within what a temperature makes (``TEMPERATURE_K3``): its level there is that
    temperature's, no precision loss. The 8192-token Llama's healthy run at 0.6 over one at 0.9,
    with a bf16 trainer, put 2.3x the baseline outside a spot of 2% of its tokens and was named
    a precision loss there."""
    e = evidence_of(ctx.result(baseline), baseline.Evidence)
    if e is None or not baseline.another_temperature(
        e.excess_shape, e.mix_shift, e.rate_ratio, e.nll_shift, e.spread_shift, e.rate_ratio_ci
    ):
        return False
    return ratio <= baseline.T.TEMPERATURE_K3


def _grows(ctx: Context, out: Outside) -> bool:
    """The excess over the baseline outside the part grows with the KV position: its far half's
    over its near half's (each against the baseline at the same position and token mix) at the
    ``baseline`` check's thresholds (1.5x, the interval above 1.2). A precision loss raises
    every position alike or nearly (an fp8 KV cache: 16.5x and 17.9x the baseline at KV 32-63
    and 64-127 in ``combo-template-fp8kv``'s first turns, 10.8x and 14-16x at 32-63 and 64-255
    on ``combo-fp8kv-gpu``'s other gpus); an excess that grows with the position is the part's
    own path reaching there with the positions it depends on (``cp-decode-rope``, the decode
    path's rotary angles in bf16: 5.1x at 32-63 and 11.6x at 64-127 in the first turns)."""
    view = ctx.baseline
    if view is None or view.cube is None or ctx.cube is None:
        return False
    spec = ctx.cube.spec
    within = out.region.get(K.KV_POSITION, range(spec.levels(spec.index(K.KV_POSITION))))
    codes = [
        c for c in within
        if contrast_baseline(ctx.cube, view.cube, {**out.region, K.KV_POSITION: [c]}) is not None
    ]  # fmt: skip
    if len(codes) < 2:
        return False
    half = len(codes) // 2
    near = contrast_baseline(ctx.cube, view.cube, {**out.region, K.KV_POSITION: codes[:half]})
    far = contrast_baseline(ctx.cube, view.cube, {**out.region, K.KV_POSITION: codes[half:]})
    if near is None or far is None:
        return False
    return hotter(far, near)


Contrast = tuple[float, tuple[float, float]]  # a rate ratio over the baseline, its 95% interval


def hotter(a: Contrast, b: Contrast) -> bool:
    """Tokens ``a`` over the baseline stand above tokens ``b`` over it at the ``baseline``
    check's thresholds (their ratio 1.5x, its interval above 1.2; the two sets of tokens
    disjoint, so their log errors add in quadrature)."""
    ratio = a[0] / b[0]
    sd = math.hypot(_log_sd(a[1]), _log_sd(b[1]))
    ci = (ratio * math.exp(-1.96 * sd), ratio * math.exp(1.96 * sd))
    t = baseline.T
    return relative(ratio, ci, t.BASELINE_FACTOR, t.BASELINE_CI_LOW, t.BASELINE_FAIL) != OK


def _log_sd(ci: tuple[float, float]) -> float:
    """The standard deviation of a log ratio from its 95% interval."""
    return math.log(ci[1] / ci[0]) / (2 * 1.96)


def outside(ctx: Context, first: Weighed) -> Outside | None:
    """The part's outside, or None when the part is no set of gpus, steps or turns the
    per-sequence state can leave out (a code path of some batches or lengths)."""
    spec = ctx.cube.spec if ctx.cube is not None else None
    region = first.support.region
    if spec is None:
        return None
    if first.cause.KEY in TURN_PARTS:
        return _turns(spec, later=True)
    if not region:
        return None
    if K.GPU in region:
        return _gpus(spec, region[K.GPU])
    if set(region) == {K.STEP}:
        return _steps(ctx, region[K.STEP])
    first_share = _first_turn_share(ctx, region)
    if first_share is None:
        return None
    if first_share < FIRST_TURN_MASS:
        return _turns(spec, later=True, part=region)
    if first_share > 1 - FIRST_TURN_MASS:
        return _turns(spec, later=False, part=region)
    return None


def _below(spec: Any, region: dict[str, list[int]], out: Outside) -> Outside:
    """A part of long KV positions reaches every position past it: the path takes the tokens
    past a KV length (a split-KV merge, a sliding window), so the precision's outside keeps the
    KV positions before the part only. The Llama family's off-by-one merge past 96 keys was
    named at "KV 32-127" (the first turns) and left the later turns, all past 96 and as hot,
    outside it: a precision loss 3.0x the baseline was named there, where none was planted
    (docs/diagnose.md "Another family"). No precision loss is weighed past the part (the
    cheaper error: one there is missed). The policy's lean is read on the whole outside's
    responses: other weights lean a response whatever its positions."""
    if K.KV_POSITION not in region:
        return out
    d = spec.index(K.KV_POSITION)
    first = min(region[K.KV_POSITION])
    before = list(range(first))
    text = f"{out.text} before KV {spec.level_label(d, [first]).split('-')[0]}"
    return Outside({**out.region, K.KV_POSITION: before}, out.restrict, text, out.precision)


def _gpus(spec: Any, codes: list[int]) -> Outside:
    d = spec.index(K.GPU)
    names = {spec.level_label(d, [c]) for c in codes}
    rest = [c for c in range(spec.levels(d)) if c not in codes]
    return Outside(
        {K.GPU: rest},
        lambda st: off_gpus(st, names),
        f"the sequences of the gpus other than {', '.join(sorted(names))}",
    )


def _steps(ctx: Context, codes: list[int]) -> Outside | None:
    spec = ctx.cube.spec if ctx.cube is not None else None
    if spec is None:
        return None
    d = spec.index(K.STEP)
    rest = [c for c in range(spec.levels(d)) if c not in codes]
    numbers = {
        int(n)
        for v in ctx.runs.values()
        for n, c in zip(v.rates.numbers, v.rates.codes, strict=True)
        if int(c) in rest and np.isfinite(n)
    }
    if not rest or not numbers:
        return None
    label = spec.level_label(d, codes)
    return Outside(
        {K.STEP: rest},
        lambda st: in_steps(st, numbers),
        f"the steps other than {label}",
        precision=False,  # the steps' cause, weaker there: see Outside.precision
    )


def _turns(spec: Any, later: bool, part: dict[str, list[int]] | None = None) -> Outside:
    """The first turns (outside a part of the later turns), or the later turns; ``part``: the
    named part, whose KV positions the precision's outside stops before (``_below``)."""
    d, bins = spec.index(K.TURN_KIND), spec.dims[spec.index(K.BIN)].size
    labels = list(spec.dims[d].labels)
    keep = "first" if later else "later"
    code = labels.index(keep) if keep in labels else (0 if later else 1)
    cells = np.zeros(2 * bins, bool)  # hot-sequence cells: (turn > 0) x probability bin
    cells[(0 if later else bins) : (bins if later else 2 * bins)] = True

    def restrict(st: HotSequenceState) -> HotSequenceState:
        wide = np.zeros(max(len(cells), int(st.cell.max(initial=0)) + 1), bool)
        wide[: len(cells)] = cells
        return in_cells(st, wide)

    return Outside({K.TURN_KIND: [code]}, restrict, f"the {keep} turns", part=part or {})


def _first_turn_share(ctx: Context, region: dict[str, list[int]]) -> float | None:
    """The share of the part's K3 mass in the first turns, from the tables of the cube that
    hold the turn kind beside one of the part's dimensions. The part is a conjunction of its
    dimensions, so its tokens lie in the first turns (or in the later ones) wholly when any one
    dimension's do (``turn`` 2 with a length and a KV position: the later turns); a share in
    between is the dimension's, not the conjunction's, and leaves the part undecided."""
    shares = [s for name in region if (s := _dim_first_share(ctx, name, region[name])) is not None]
    if any(s < FIRST_TURN_MASS for s in shares):
        return min(shares)
    if any(s > 1 - FIRST_TURN_MASS for s in shares):
        return max(shares)
    return shares[0] if shares else None


def _dim_first_share(ctx: Context, name: str, codes: list[int]) -> float | None:
    """The share of the K3 mass of one dimension's codes in the first turns."""
    cube = ctx.cube
    if cube is None:
        return None
    spec, t = cube.spec, SideTables(cube)
    d, e = spec.index(K.TURN_KIND), spec.index(name)
    labels = list(spec.dims[d].labels)
    first = labels.index("first") if "first" in labels else 0
    if e == d:
        return 1.0 if codes == [first] else 0.0 if first not in codes else None
    if name == K.TURN and "0" in (turns := list(spec.dims[e].labels)):
        zero = turns.index("0")  # the first turn is the turn kind's first: no table joins them
        return 1.0 if codes == [zero] else 0.0 if zero not in codes else None
    if spec.table_index(sorted({d, e})) is None:
        return None
    mask = np.isin(np.arange(spec.levels(e)), codes)
    a = region_sums(t, {e: mask}, d).a
    total = float(np.sum(a))
    return float(a[first]) / total if total > 0 else None
