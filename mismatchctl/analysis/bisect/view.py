"""``bisect`` as sections and JSON: the verdict first, then every setting's numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl.analysis import sections as X

if TYPE_CHECKING:
    from mismatchctl.analysis.bisect.build import Bisect
    from mismatchctl.analysis.bisect.metrics import Numbers


# a single change accounting for less of the mismatch than this does not explain any of it
ALONE = 0.05


def _g(x: float) -> str:
    return f"{x:.2g}"


def _share(n: Numbers) -> str:
    if n.share is None:
        return "-"
    ci = "" if n.share_ci is None else f" [{n.share_ci[0]:.0%}, {n.share_ci[1]:.0%}]"
    return f"{n.share:.0%}{ci}"


def verdict(b: Bisect) -> list[str]:
    """The answer, first sentence first."""
    start = b.outcomes[0].overall
    if b.mismatch == 0:
        return [f"the sample's rollout and trainer logprobs are equal (K3 0 over {b.tokens:,} "
                "tokens): there is no mismatch to bisect"]  # fmt: skip
    if not b.best:
        return ["only the start setting ran: nothing to compare (see the skipped settings)"]
    best = b.outcome(b.best)
    if b.reproduces:
        out = [f"{best.name} ({best.what}) reproduces the rollout logprobs to K3 "
               f"{_g(best.overall.k3_rollout)} (the trainer's own setting: "
               f"{_g(start.k3_rollout)})"]  # fmt: skip
    else:
        out = [f"nothing here reproduces the rollout logprobs: the closest, {best.name}, leaves "
               f"K3 {_g(best.overall.k3_rollout)} of the trainer setting's "
               f"{_g(start.k3_rollout)} ({_share(best.overall)} accounted for): the engine has "
               "a path these settings do not have (an attention kernel, a fused op, its "
               "sampler's processing): look there"]  # fmt: skip
    if b.best_change is not None:
        change = b.outcome(b.best_change)
        if (change.overall.share or 0.0) < ALONE:
            out.append(f"no single change accounts for the mismatch alone (the most, "
                       f"{change.name}: {_share(change.overall)}): it takes the changes "
                       "together")  # fmt: skip
        else:
            out.append(f"of the single changes, {change.name} ({change.what}) moves the "
                       f"trainer side furthest toward the rollout: it accounts for "
                       f"{_share(change.overall)} of the mismatch")  # fmt: skip
    for kind, name in b.by_turn_best.items():
        o = b.outcome(name).by_turn[kind]
        if o.tokens:
            out.append(f"{kind} turns ({o.tokens:,} tokens): closest is {name}, K3 "
                       f"{_g(o.k3_rollout)}, {_share(o)} of their mismatch")  # fmt: skip
    return out


def bisect_sections(b: Bisect) -> list[X.Section]:
    lines = [X.Line(t, "bold" if i == 0 else "") for i, t in enumerate(verdict(b))]
    facts = [
        X.Fact("run", b.run, X.Kind.LABEL),
        X.Fact("model", b.model, X.Kind.TEXT),
        X.Fact("device", b.device, X.Kind.TEXT),
        X.Fact("sequences re-scored", b.sequences, X.Kind.COUNT,
               remark=f"a uniform sample (seed {b.seed}) of {b.candidates:,}"),
        X.Fact("model tokens", b.tokens, X.Kind.COUNT),
        X.Fact("mismatch on the sample (K3, trainer vs rollout)", b.mismatch),
        X.Fact("trainer check", b.outcomes[0].overall.k3_trainer,
               remark=f"K3 of the start against the trainer side, at most {_g(b.trainer_threshold)}"),
    ]  # fmt: skip
    if b.trainer_temperature is not None:
        facts.append(X.Fact("trainer temperature", f"{b.trainer_temperature:g}", X.Kind.TEXT,
                            remark="the trainer divides its logits by the run's temperature: "
                            "every setting here does"))  # fmt: skip
    out: list[X.Section] = [
        X.Lines("bisect-verdict", f"Bisect: {b.run}", lines),
        X.Facts("bisect-summary", "Sample", facts),
        _table(b),
    ]
    notes = [f"{name}: skipped, {why}" for name, why in b.skipped]
    if b.without_prompt:
        notes.append(f"{b.without_prompt:,} sampled sequences left out: the store has not "
                     "their prompt's token ids")  # fmt: skip
    if notes:
        out.append(X.Lines("bisect-notes", "Notes", [X.Line(n, "note") for n in notes]))
    return out


def _table(b: Bisect) -> X.Table:
    rows = []
    for o in b.outcomes:
        n = o.overall
        rows.append({
            "setting": o.name, "what": o.what,
            "k3_rollout": n.k3_rollout,
            "k3_rollout_ci": f"{_g(n.k3_rollout_ci[0])} - {_g(n.k3_rollout_ci[1])}",
            "mean_d_rollout": n.mean_d_rollout,
            "k3_trainer": n.k3_trainer, "mean_d_trainer": n.mean_d_trainer,
            "share": _share(n), "best": o.name == b.best,
        })  # fmt: skip
    columns = [
        X.Column("setting", "setting", X.Kind.LABEL),
        X.Column("what", "what it changes", X.Kind.TEXT),
        X.Column("k3_rollout", "K3 vs rollout"),
        X.Column("k3_rollout_ci", "95% interval", X.Kind.TEXT),
        X.Column("mean_d_rollout", "mean d vs rollout"),
        X.Column("k3_trainer", "K3 vs trainer"),
        X.Column("mean_d_trainer", "mean d vs trainer"),
        X.Column("share", "share of mismatch", X.Kind.TEXT),
    ]
    note = ("d = re-scored - side over the sample's model tokens; K3 = mean(exp(d) - 1 - d); "
            "intervals: a bootstrap over whole sequences; share = 1 - K3(setting vs rollout) / "
            "K3(start vs rollout). docs/bisect.md")  # fmt: skip
    return X.Table("bisect-settings", "Settings", columns, rows, note=note, bold_key="best")


def _numbers(n: Numbers) -> dict[str, Any]:
    return {
        "tokens": n.tokens,
        "k3_rollout": n.k3_rollout, "k3_rollout_ci": list(n.k3_rollout_ci),
        "mean_d_rollout": n.mean_d_rollout,
        "k3_trainer": n.k3_trainer, "k3_trainer_ci": list(n.k3_trainer_ci),
        "mean_d_trainer": n.mean_d_trainer,
        "share": n.share, "share_ci": None if n.share_ci is None else list(n.share_ci),
    }  # fmt: skip


def bisect_dict(b: Bisect) -> dict[str, Any]:
    return {"bisect": {
        "run": b.run, "model": b.model, "device": b.device, "seed": b.seed,
        "verdict": verdict(b),
        "sequences": b.sequences, "tokens": b.tokens, "candidates": b.candidates,
        "without_prompt": b.without_prompt, "mismatch_k3": b.mismatch,
        "trainer_check": {"k3": b.outcomes[0].overall.k3_trainer,
                          "threshold": b.trainer_threshold},
        "trainer_temperature": b.trainer_temperature,
        "best": b.best or None, "reproduces": b.reproduces, "best_change": b.best_change,
        "by_turn_best": b.by_turn_best,
        "settings": [{"setting": o.name, "what": o.what, "changes": o.changes,
                      **_numbers(o.overall),
                      "by_turn": {k: _numbers(v) for k, v in o.by_turn.items()}}
                     for o in b.outcomes],
        "skipped": [{"setting": n, "why": w} for n, w in b.skipped],
    }}  # fmt: skip
