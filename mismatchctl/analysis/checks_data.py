"""Checks of the data-integrity and semantic layers: are the two sides the same tokens, free of
fill values, and the same distribution (temperature, top-p, processed logprobs)?"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow.compute as pc

from mismatchctl import schema as S
from mismatchctl.analysis import diagnose_thresholds as T
from mismatchctl.analysis.diagnose_base import (
    DATA,
    MAX_LISTED,
    NA,
    SEMANTIC,
    Check,
    Context,
    advice_if,
    fmt,
    grade,
    misaligned,
    pct,
)
from mismatchctl.columns import arrow_of
from mismatchctl.engines.plan import Selection
from mismatchctl.stats import registry as M
from mismatchctl.stats.comoments import LAG_NAMES, correlation, regression
from mismatchctl.stats.misalign import FACTOR as MISALIGN_FACTOR
from mismatchctl.stats.offset import offset_summary
from mismatchctl.stats.sentinels import FILL_OTHER_MAX, SENTINEL_MAX, ZERO_RUN_MIN
from mismatchctl.store.parts import read_columns

PROCESSED_HINT = (
    "make both sides compute the same distribution: the engine must return processed logprobs "
    "(vLLM V1: set logprobs-mode=processed_logprobs; V1 returns raw logprobs by default) and the "
    "trainer must apply the same temperature, top-p/top-k and penalties to its logits"
)


def alignment(ctx: Context) -> Check:
    title = "Alignment of the two sides (lag 0 vs lag +-1)"
    corr = {name: correlation(ctx.state.lags[i]) for i, name in enumerate(LAG_NAMES)}
    evidence: dict[str, Any] = {f"correlation_{k}": v for k, v in corr.items()}
    evidence["pairs_lag0"] = int(ctx.state.lags[0][0])
    k3 = {
        name: (float(s / n) if n else None)
        for name, (n, s) in zip(LAG_NAMES, ctx.state.lag_k3, strict=True)
    }
    evidence.update({f"vllm_kl_{k}": v for k, v in k3.items()})
    shift_text = (
        f"; vllm_kl {fmt(k3['lag0'])} as stored, {fmt(k3['lag_plus1'])} pairing each rollout "
        f"token with the trainer's next position, {fmt(k3['lag_minus1'])} with its previous"
    )
    lag0 = corr["lag0"]
    if lag0 is None:
        return Check(DATA, "alignment", title, NA, "too few tokens to correlate", evidence)
    shifted = {k: v for k, v in corr.items() if k != "lag0" and v is not None}
    best = max(shifted, key=shifted.__getitem__, default=None)
    if best is not None and shifted[best] > lag0 + T.ALIGN_MARGIN:
        where = "one position later" if best == "lag_plus1" else "one position earlier"
        return Check(
            DATA, "alignment", title, "fail",
            f"the trainer logprobs match the rollout logprobs {where} (correlation "
            f"{fmt(shifted[best])} at {best} vs {fmt(lag0)} at lag 0): an off-by-one shift"
            + shift_text,
            evidence,
            "check how the trainer's logprobs are sliced against the response tokens (the "
            "logits at position t score token t+1); compare one sample by hand",
        )  # fmt: skip
    weak = lag0 < T.ALIGN_WARN_CORR
    finding = (
        f"lag-0 correlation {fmt(lag0)}; lag +1 {fmt(corr['lag_plus1'])}, "
        f"lag -1 {fmt(corr['lag_minus1'])}{shift_text}"
    )
    m = ctx.state.misaligned
    share = m.tokens / ctx.state.sentinels.tokens if ctx.state.sentinels.tokens else 0.0
    evidence["misaligned_turns"] = {
        "turns_tested": m.turns,
        "misaligned": m.misaligned,
        M.TOKENS: m.tokens,
        M.TOKEN_SHARE: share,
        "one_position_later": m.later,
        "one_position_earlier": m.earlier,
        "samples": _turn_samples(ctx.report.selection, m.examples),
    }
    if m.misaligned:
        finding = (
            f"{m.misaligned} of {m.turns} turns tested ({pct(share)} of the tokens) match the "
            "rollout logprobs one position off (their shifted pairing at least "
            f"{MISALIGN_FACTOR:g}x closer than the stored one): an off-by-one shift in some "
            f"samples; {finding}"
        )
        advice = (
            "some samples are sliced one position off (one worker, one code path, the turns "
            "after a tool response): find what the listed samples share and compare one by hand"
        )
        verdict = grade(share >= T.ALIGN_PART_FAIL_SHARE, True)
        return Check(DATA, "alignment", title, verdict, finding, evidence, advice)
    advice = "check that both columns hold logprobs of the same sampled tokens" if weak else None
    return Check(DATA, "alignment", title, grade(False, weak), finding, evidence, advice)


def token_ids(ctx: Context) -> Check:
    return Check(
        DATA,
        "token_ids",
        "Identical token ids on both sides",
        NA,
        "the store keeps one token id column per token, so ids of the two sides cannot be "
        "compared after ingest",
        {},
        "when the dumps carry both sides' ids, compare them before ingest",
    )


def sentinels(ctx: Context) -> Check:
    title = "Sentinel values among model tokens"
    s = ctx.state.sentinels
    low = s.low_rollout + s.low_trainer
    share = s.zero_run_tokens / s.tokens if s.tokens else 0.0
    evidence: dict[str, Any] = {
        f"values_le_{SENTINEL_MAX:g}": {"rollout": s.low_rollout, "trainer": s.low_trainer},
        "one_sided_zeros": {"rollout": s.zero_rollout, "trainer": s.zero_trainer},
        f"zero_run_tokens_min_run_{ZERO_RUN_MIN}": s.zero_run_tokens,
        "zero_run_share": share,
        "steps": dict(sorted(s.steps.items(), key=lambda kv: -kv[1])[:20]),
        "samples": samples_of(ctx.report.selection, s.examples),
        "non_finite": "rejected at ingest (with --skip-bad such samples are dropped and counted "
        f"as dropped_sequences: {ctx.report.excluded.get('dropped_sequences', 0)})",
    }
    verdict = grade(low > 0 or share >= T.SENTINEL_FAIL_SHARE, s.zero_run_tokens > 0)
    finding = (
        f"{low} value(s) <= {SENTINEL_MAX:g}; {s.zero_run_tokens} token(s) ({pct(share)}) in "
        f"runs of >= {ZERO_RUN_MIN} one-sided exact 0.0 where the other side goes down to "
        f"p <= {math.exp(FILL_OTHER_MAX):g}"
    )
    advice = (
        "a fill value sits where a logprob should be: check the mask against the value arrays "
        "(masked positions hold 0.0 in verl and slime, -9999 in SkyRL) and the samples listed"
    )
    return Check(DATA, "sentinels", title, verdict, finding, evidence, advice_if(verdict, advice))


def samples_of(selection: Selection, examples: list[tuple[str, int, int, str]]) -> list[dict]:
    """The examples with the sample id of each sequence, read from the store's sequence rows."""
    wanted: dict[str, set[int]] = {}
    for run, _, seq, _ in examples:
        wanted.setdefault(run, set()).add(seq)
    ids: dict[tuple[str, int], str] = {}
    for run, seqs in wanted.items():
        for path in selection.sequence_paths.get(run, []):
            table = read_columns(path, [S.SEQ, S.SAMPLE_ID])
            table = table.filter(
                pc.is_in(
                    table.column(S.SEQ), value_set=arrow_of(np.array(sorted(seqs), dtype=np.int64))
                )
            )
            for seq, sid in zip(
                *(table.column(c).to_pylist() for c in (S.SEQ, S.SAMPLE_ID)), strict=True
            ):
                ids[(run, seq)] = sid
    return [
        {"run": run, "step": step, "sample_id": ids.get((run, seq)), "seq": seq, "what": what}
        for run, step, seq, what in examples
    ]


def _turn_samples(
    selection: Selection, examples: list[tuple[str, int, int, int, str]]
) -> list[dict]:
    """Misaligned turns as :func:`_samples` lists them (the turn and the lag in ``what``)."""
    return samples_of(
        selection,
        [(run, step, seq, f"turn {turn}: {lag}") for run, step, seq, turn, lag in examples],
    )


def empty_sequences(ctx: Context) -> Check:
    title = "Sequences without model tokens (empty mask)"
    empty = ctx.report.excluded.get("empty_sequences", 0)
    whole = ctx.report.whole()
    total = empty + (whole.partial.sequences if whole else 0)
    share = empty / total if total else 0.0
    evidence = {
        "empty_sequences": empty,
        M.SEQUENCES: total,
        "share": share,
        "dropped_sequences": ctx.report.excluded.get("dropped_sequences", 0),
    }
    verdict = grade(share >= T.EMPTY_FAIL_SHARE, share >= T.EMPTY_WARN_SHARE)
    advice = (
        "check that the mask column is the response (loss) mask, not attention_mask or an "
        "inverted mask: `mismatchctl runs show RUN` lists the columns used"
    )
    return Check(
        DATA, "empty_sequences", title, verdict,
        f"{empty} of {total} sequences ({pct(share)}) have no model token", evidence,
        advice_if(verdict, advice),
    )  # fmt: skip


def trailing_padding(ctx: Context) -> Check:
    title = "Padding stored as model tokens"
    t = ctx.state.trailing
    share = t.padded_tokens / t.tokens if t.tokens else 0.0
    examples = [(run, step, seq, f"ends in {n} tokens at 0.0") for run, step, seq, n in t.examples]
    evidence = {
        M.SEQUENCES: t.sequences,
        "padded_sequences": t.padded,
        "padded_tokens": t.padded_tokens,
        M.TOKEN_SHARE: share,
        "min_run": T.TRAILING_ZERO_RUN,
        "samples": samples_of(ctx.report.selection, examples),
    }
    verdict = grade(share >= T.TRAILING_ZERO_FAIL_SHARE, t.padded > 0)
    finding = (
        f"{t.padded} of {t.sequences} sequences end in >= {T.TRAILING_ZERO_RUN} tokens at exact "
        f"0.0 on both sides ({t.padded_tokens} tokens, {pct(share)} of the tokens)"
    )
    advice = (
        "right padding was stored as model tokens (a dump ingested without its mask): re-ingest "
        "it with the mask (`--map mask=<column>`); `mismatchctl runs show RUN` lists the columns "
        "used and the notes of each source"
    )
    return Check(
        DATA, "trailing_padding", title, verdict, finding, evidence, advice_if(verdict, advice)
    )


def duplicates(ctx: Context) -> Check:
    """Exact duplicate sequences, as counted at ingest (per source file, whatever the step
    range of the selection); n/a for sources ingested before they were counted."""
    title = "Exact duplicate sequences (double writes)"
    sel = ctx.report.selection
    sources = [
        (run.name, s)
        for run in sel.runs
        for s in run.sources
        if all(s.tags.get(k) == v for k, v in sel.tags.items())
    ]
    counted = [(run, s) for run, s in sources if s.duplicate_sequences is not None]
    if not counted:
        return Check(
            DATA, "duplicates", title, NA,
            "not counted: the sources were ingested before duplicate sequences were counted "
            "(re-ingest them into a new run to count)",
        )  # fmt: skip
    dup = sum(s.duplicate_sequences or 0 for _, s in counted)
    total = sum(s.sequences for _, s in counted)
    share = dup / total if total else 0.0
    evidence: dict[str, Any] = {
        "duplicate_sequences": dup,
        M.SEQUENCES: total,
        "share": share,
        "sources": [
            {"run": run, "path": s.path, "duplicate_sequences": s.duplicate_sequences}
            for run, s in counted
            if s.duplicate_sequences
        ][:MAX_LISTED],
        "sources_not_counted": len(sources) - len(counted),
    }
    verdict = grade(share >= T.DUPLICATE_FAIL_SHARE, dup > 0)
    finding = (
        f"{dup} of {total} sequences ({pct(share)}) repeat an earlier sequence of the same step "
        "exactly (sample id, tokens and both logprob vectors)"
    )
    if len(counted) < len(sources):
        finding += f"; not counted in {len(sources) - len(counted)} source(s) ingested before"
    advice = (
        "a batch was written twice (a dump function called twice, or several ranks writing the "
        "same samples): ingest one copy; `mismatchctl runs show RUN` lists each source's count"
    )
    return Check(DATA, "duplicates", title, verdict, finding, evidence, advice_if(verdict, advice))


def _not_assessed(ctx: Context, name: str, title: str) -> Check | None:
    if misaligned(ctx) is None:
        return None
    return Check(
        SEMANTIC, name, title, NA,
        "not assessed: the sides are shifted against each other (see alignment)",
    )  # fmt: skip


def offset(ctx: Context) -> Check:
    title = "Systematic offset between the sides"
    if skipped := _not_assessed(ctx, "offset", title):
        return skipped
    o = offset_summary(ctx.state.offset)
    m, z, neg = o[M.LOG_RATIO_MEAN], o["log_ratio_z"], o["negative_share"]
    evidence = {
        k: o[k] for k in (M.LOG_RATIO_MEAN, "log_ratio_se", "log_ratio_z", "negative_share")
    }
    if m is None or z is None or neg is None:
        return Check(
            SEMANTIC, "offset", title, NA, "too few sequences for a standard error", evidence
        )
    same_sign = neg if m < 0 else 1 - neg
    systematic = abs(z) >= T.OFFSET_Z and same_sign >= T.OFFSET_SIGN_SHARE
    verdict = grade(systematic and abs(m) >= T.OFFSET_FAIL, systematic and abs(m) >= T.OFFSET_WARN)
    side = "rollout" if m < 0 else "trainer"
    finding = (
        f"mean log ratio r = {fmt(m)} (z = {fmt(z)}, sequence-clustered); {pct(same_sign)} of "
        f"tokens have r of that sign"
    )
    if verdict != "ok":
        finding += f": the {side} side is systematically higher"
    advice = advice_if(verdict, PROCESSED_HINT)
    return Check(SEMANTIC, "offset", title, verdict, finding, evidence, advice)


def _topp_signature(ctx: Context) -> tuple[float | None, bool, bool]:
    """(mean ratio, warn-level signature, fail-level signature) of a renormalised rollout side."""
    o = offset_summary(ctx.state.offset)
    q, z, neg = o["ratio_mean"], o["ratio_z"], o["negative_share"]
    if q is None or z is None or neg is None:
        return q, False, False
    base = z <= -T.OFFSET_Z and neg >= T.TOPP_NEGATIVE_SHARE
    deficit = 1.0 - q
    return q, base and deficit >= T.TOPP_DEFICIT_WARN, base and deficit >= T.TOPP_DEFICIT_FAIL


def temperature(ctx: Context) -> Check:
    title = "Temperature applied on one side only"
    if skipped := _not_assessed(ctx, "temperature", title):
        return skipped
    reg = regression(ctx.state.lags[0])
    slope, r2 = reg["slope"], reg["diff_r2"]
    evidence: dict[str, Any] = {**reg, "implied_temperature": slope}
    if slope is None or r2 is None or slope <= 0:
        return Check(
            SEMANTIC, "temperature", title, NA,
            f"no positive relation between the sides (slope {fmt(slope)})", evidence,
        )  # fmt: skip
    dev = abs(slope - 1.0)
    fail = dev >= T.TEMP_SLOPE_FAIL and r2 >= T.TEMP_R2_FAIL
    warn = dev >= T.TEMP_SLOPE_WARN and r2 >= T.TEMP_R2_WARN
    finding = (
        f"trainer ~ {fmt(slope)} x rollout logprob + c; the line explains {pct(r2)} of r's variance"
    )
    if fail or warn:
        sharper = "rollout" if slope < 1 else "trainer"
        finding += (
            f": the {sharper} side is sharper, as if its logits were divided by a temperature "
            f"of about {fmt(min(slope, 1 / slope))} that the other side lacks (least squares "
            "understates the gap)"
        )
    if fail and _topp_signature(ctx)[2]:
        fail, warn = False, True  # a top-p renormalisation also bends the line: see that check
        finding += "; the top-p signature is present too, fix that first"
    verdict = grade(fail, warn)
    advice = advice_if(verdict, PROCESSED_HINT)
    return Check(SEMANTIC, "temperature", title, verdict, finding, evidence, advice)


def top_p(ctx: Context) -> Check:
    title = "Top-p / top-k renormalised on one side"
    if skipped := _not_assessed(ctx, "top_p", title):
        return skipped
    q, warn, fail = _topp_signature(ctx)
    o = offset_summary(ctx.state.offset)
    evidence = {
        "ratio_mean": q,
        "ratio_se": o["ratio_se"],
        "ratio_z": o["ratio_z"],
        "negative_share": o["negative_share"],
    }
    if q is None:
        return Check(
            SEMANTIC, "top_p", title, NA, "too few sequences for a standard error", evidence
        )
    verdict = grade(fail, warn)
    finding = (
        f"mean ratio rho = {fmt(q, 4)} (1 expected), rollout higher on "
        f"{pct(o['negative_share'])} of tokens"
    )
    if verdict != "ok":
        finding += f": the rollout side looks renormalised over a kept mass of about {fmt(q)}"
    advice = (
        "the engine renormalises over the top-p/top-k set and the trainer does not: compute the "
        "trainer logprobs under the same truncation, or sample with top_p = 1 and top_k = -1 "
        "(a smaller top-p means fewer low-probability tokens but a biased gradient)"
    )
    return Check(SEMANTIC, "top_p", title, verdict, finding, evidence, advice_if(verdict, advice))
