"""Training curves end to end: ingest-metrics into the store, the join with the per-step mismatch
in report / compare / diagnose, and every way it can go wrong."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import open_store
from mismatchctl.render.html import page_json_blocks
from tests.helpers import EVIL, cli, multi_gpu_dump, step_dump, tree_digest
from tests.planted import Plan, write


def _log(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _report(*args: str) -> dict:
    ran = cli("report", *args, "--json", "-")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


@pytest.fixture
def run12(store: Path, tmp_path: Path) -> Path:
    """Run `r` of 12 dumped steps (0-11) with mismatch growing over the steps."""
    multi_gpu_dump(tmp_path / "d.parquet")
    assert cli("ingest", str(tmp_path / "d.parquet"), "--run", "r").code == 0
    return store


def _kl_by_step(doc: dict, run: str = "r") -> dict[int, float]:
    return {
        g["by"]["step"]: g["metrics"]["vllm_kl"]
        for g in doc["groups"]
        if set(g["by"]) == {"run", "step"} and g["by"]["run"] == run
    }


def test_ingest_metrics_records_provenance_and_is_idempotent(run12: Path, tmp_path: Path) -> None:
    log = _log(tmp_path / "m.jsonl", [{"step": s, "actor/grad_norm": 1.0 + s} for s in range(12)])
    first = cli("ingest-metrics", str(log), "--run", "r", "--json")
    assert first.code == 0, first.err
    doc = json.loads(first.out)
    assert doc["status"] == "ingested" and doc["added"] == 12
    assert doc["source"]["metrics"] == ["actor/grad_norm"]
    assert (doc["source"]["min_step"], doc["source"]["max_step"]) == (0, 11)
    before = tree_digest(run12)
    again = cli("ingest-metrics", str(log), "--run", "r")
    assert again.code == 0 and "Nothing new" in again.err
    assert tree_digest(run12) == before
    shown = json.loads(cli("runs", "show", "r", "--json").out)
    assert [s["path"] for s in shown["metric_sources"]] == [str(log)]
    assert shown["metric_sources"][0]["values"] == 12


def test_conflicting_values_are_refused_and_the_store_is_unchanged(
    run12: Path, tmp_path: Path
) -> None:
    a = _log(tmp_path / "a.jsonl", [{"step": s, "reward": 0.5} for s in range(6)])
    b = _log(tmp_path / "b.jsonl", [{"step": s, "reward": 0.5 + (s == 3)} for s in range(3, 9)])
    assert cli("ingest-metrics", str(a), "--run", "r").code == 0
    before = tree_digest(run12)
    ran = cli("ingest-metrics", str(b), "--run", "r")
    assert ran.code != 0
    assert "1 value(s) differ" in ran.err and "`reward` at step 3" in ran.err
    assert "Hint:" in ran.err and "--replace" in ran.err
    assert tree_digest(run12) == before
    replaced = json.loads(cli("ingest-metrics", str(b), "--run", "r", "--replace", "--json").out)
    assert replaced["replaced"] == 6 and replaced["added"] == 6
    table = open_store(run12).run("r").metric_sources
    assert [s.path for s in table] == [str(b)]  # a's values were all replaced: a is gone


def test_equal_values_merge_and_other_steps_append(run12: Path, tmp_path: Path) -> None:
    a = _log(tmp_path / "a.jsonl", [{"step": s, "reward": s / 10} for s in range(6)])
    b = _log(tmp_path / "b.jsonl", [{"step": s, "reward": s / 10} for s in range(4, 10)])
    assert cli("ingest-metrics", str(a), "--run", "r").code == 0
    doc = json.loads(cli("ingest-metrics", str(b), "--run", "r", "--json").out)
    assert (doc["added"], doc["unchanged"]) == (4, 2)
    curves = _report("r")["curves"]["r"]
    assert curves["columns"]["reward"][:10] == pytest.approx([s / 10 for s in range(10)])
    assert curves["origins"]["reward"] == f"{a}, {b}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "nope"], "no run `nope`"),
        (["--run", "r", "--metric", "vllm_kl=x"], "no metric `x`"),
    ],
)
def test_errors_name_what_is_wrong(run12: Path, tmp_path: Path, args, message) -> None:
    log = _log(tmp_path / "m.jsonl", [{"step": 1, "x2": 1.0}])
    before = tree_digest(run12)
    ran = cli("ingest-metrics", str(log), *args)
    assert ran.code != 0 and message in ran.err and "Hint:" in ran.err
    assert tree_digest(run12) == before


def test_a_metric_named_like_a_dump_curve_must_be_renamed(run12: Path, tmp_path: Path) -> None:
    log = _log(tmp_path / "m.jsonl", [{"step": 1, "vllm_kl": 0.1, "loss": 2.0}])
    ran = cli("ingest-metrics", str(log), "--run", "r")
    assert ran.code != 0 and "metric `vllm_kl` has the name" in ran.err
    assert "--metric log_vllm_kl=vllm_kl" in ran.err
    ok = cli("ingest-metrics", str(log), "--run", "r", "-M", "log_vllm_kl=vllm_kl", "-M", "loss")
    assert ok.code == 0, ok.err


def test_runs_rm_removes_the_metrics_file(run12: Path, tmp_path: Path) -> None:
    log = _log(tmp_path / "m.jsonl", [{"step": s, "loss": 1.0} for s in range(3)])
    assert cli("ingest-metrics", str(log), "--run", "r").code == 0
    assert list((run12 / "metrics").rglob("*.parquet"))
    assert cli("runs", "rm", "r", "--yes").code == 0
    assert not list((run12 / "metrics").rglob("*.parquet"))


def test_join_reports_steps_missing_on_either_side(run12: Path, tmp_path: Path) -> None:
    """Dumps have steps 0-11, the log 2-14 with a NaN at step 5: nothing silently dropped."""
    rows = [{"step": s, "grad_norm": float("nan") if s == 5 else 0.1 * s} for s in range(2, 15)]
    log = tmp_path / "m.jsonl"
    log.write_text("".join(json.dumps(r).replace("NaN", "NaN") + "\n" for r in rows))
    assert cli("ingest-metrics", str(log), "--run", "r").code == 0
    c = _report("r")["curves"]["r"]
    assert c["steps"] == list(range(15))
    assert c["only_log_steps"] == [12, 13, 14] and c["only_dump_steps"] == [0, 1]
    link = next(x for x in c["correlations"] if x["metric"] == "grad_norm")
    assert link["only_vllm_kl_steps"] == [0, 1] and link["only_metric_steps"] == [12, 13, 14]
    assert link["nonfinite_steps"] == [5] and link["n"] == 9
    assert c["columns"]["grad_norm"][:3] == [None, None, pytest.approx(0.2)]
    assert c["columns"]["vllm_kl"][12:] == [None, None, None]
    text = cli("report", "r").out
    assert "3 step(s) in the training logs have no dumps: 12-14" in text
    assert "2 dumped step(s) have no training-log value: 0-1" in text
    assert "grad_norm: 1 step(s) with a NaN or infinite value" in text


def test_correlations_and_lead_lag_are_exact(store: Path, tmp_path: Path) -> None:
    """The log is per-step vllm_kl two steps earlier, affinely mapped: its step-to-step changes
    are those of vllm_kl two steps earlier, so r = 1 at lag +2 exactly (vllm_kl leads), over the
    pairs of consecutive steps; Pearson / Spearman at lag 0 equal a reference computed here."""
    dump = step_dump(tmp_path / "d.parquet", list(range(30)), seed=11)
    assert cli("ingest", str(dump), "--run", "r").code == 0
    kl = _kl_by_step(_report("r"))
    lagged = {s + 2: 3.0 * v + 1.0 for s, v in kl.items()}
    noise = {s: math.sin(s) for s in range(30)}
    log = _log(
        tmp_path / "m.jsonl",
        [{"step": s, "lagged": lagged.get(s), "noise": noise[s]} for s in range(30)],
    )
    assert cli("ingest-metrics", str(log), "--run", "r").code == 0
    c = _report("r")["curves"]["r"]
    links = {x["metric"]: x for x in c["correlations"]}
    assert links["lagged"]["lead_lag_of"] == "step-to-step changes"
    assert links["lagged"]["best_lag"] == 2
    assert links["lagged"]["best_lag_r"] == pytest.approx(1.0, abs=1e-12)
    at2 = next(p for p in links["lagged"]["lead_lag"] if p["lag"] == 2)
    # changes of the log at steps 3..29 (it starts at 2) meet those of vllm_kl two steps earlier
    assert at2["n"] == links["lagged"]["best_lag_n"] == 25
    x = np.array([kl[s] for s in range(30)])
    y = np.array([noise[s] for s in range(30)])
    assert links["noise"]["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-9)
    rank = lambda a: np.argsort(np.argsort(a)).astype(float)  # noqa: E731 (no ties here)
    ref = np.corrcoef(rank(x), rank(y))[0, 1]
    assert links["noise"]["spearman"] == pytest.approx(ref, rel=1e-9)
    dx, dy = np.diff(x), np.diff(y)  # the lead-lag of the changes at lag 0, and its interval
    at0 = next(p for p in links["noise"]["lead_lag"] if p["lag"] == 0)
    r0 = np.corrcoef(dx, dy)[0, 1]
    assert at0["n"] == 29 and at0["r"] == pytest.approx(r0, rel=1e-9)
    half = 1.959963984540054 / math.sqrt(29 - 3)
    assert at0["ci_low"] == pytest.approx(math.tanh(math.atanh(r0) - half), rel=1e-9)
    assert at0["ci_high"] == pytest.approx(math.tanh(math.atanh(r0) + half), rel=1e-9)
    text = " ".join(cli("report", "r").out.split())
    assert "vllm_kl leads by 2 (r +1.00, 95% CI +1.00..+1.00, n 25)" in text


def test_too_few_steps_give_no_lead_lag(run12: Path, tmp_path: Path) -> None:
    """Eight logged steps have seven step-to-step changes: the lead-lag says it needs 10 rather
    than report a correlation of a few points (two rising curves once gave r = +1.00)."""
    log = _log(tmp_path / "m.jsonl", [{"step": s, "rising": 2.0**s} for s in range(4, 12)])
    assert cli("ingest-metrics", str(log), "--run", "r").code == 0
    link = next(x for x in _report("r")["curves"]["r"]["correlations"] if x["metric"] == "rising")
    assert link["n"] == 8 and link["lead_lag_min_pairs"] == 10
    assert link["best_lag"] is None and all(p["r"] is None for p in link["lead_lag"])
    assert max(p["n"] for p in link["lead_lag"]) == 7
    assert "n/a: 7 step changes, need 10" in " ".join(cli("report", "r").out.split())


def test_lead_lag_of_no_curve_is_a_note_not_an_empty_figure(store: Path, tmp_path: Path) -> None:
    """Eight dumped steps (the demo's synthetic run has as many): every curve's lead-lag is n/a,
    so the page says why where the figure would be an empty frame; the terminal's table already
    says n/a per curve. With 30 steps the figure is drawn, with one trace per curve."""
    for run, steps in (("few", 8), ("many", 30)):
        dump = step_dump(tmp_path / f"{run}.parquet", list(range(steps)), seed=steps)
        assert cli("ingest", str(dump), "--run", run).code == 0
        rows = [{"step": s, "grad_norm": 1.0 + (s % 3)} for s in range(steps)]
        assert (
            cli("ingest-metrics", str(_log(tmp_path / f"{run}.jsonl", rows)), "--run", run).code
            == 0
        )
        out = tmp_path / f"{run}.html"
        ran = cli("report", run, "--html", str(out))
        assert ran.code == 0, ran.err
        page = out.read_text()
        note = "No lead-lag to draw: every curve is n/a."
        figures = page_json_blocks(page)
        if run == "few":
            assert f'id="fig-lags-{run}"' not in page and f'id="lags-none-{run}"' in page
            assert note in page and "at most 7 times, and a lag needs 10 pairs" in page
            assert note not in ran.out and "n/a: 7 step changes, need 10" in " ".join(
                ran.out.split()
            )
            assert not any(
                f["layout"]["xaxis"]["title"]["text"].startswith("lag k") for f in figures
            )
        else:
            assert f'id="fig-lags-{run}"' in page and note not in page
            lags = [f for f in figures if f["layout"]["xaxis"]["title"]["text"].startswith("lag k")]
            assert len(lags) == 1 and "grad_norm" in [t["name"] for t in lags[0]["data"]]


def _spike_run(store: Path, tmp_path: Path) -> None:
    """24 steps with vllm_kl spikes at steps 7 and 15 (planted), grad norm spiking at the same
    steps, entropy flat, reward collapsing at step 17."""
    write(Plan("spike", steps=24), tmp_path / "spike.parquet")
    assert cli("ingest", str(tmp_path / "spike.parquet"), "--run", "s").code == 0
    rng = np.random.default_rng(1)
    rows = [
        {
            "step": s,
            "actor/grad_norm": (8.0 if s in (7, 15) else 1.0) + 0.05 * rng.standard_normal(),
            "actor/entropy": 0.6 + 0.01 * rng.standard_normal(),
            "critic/score/mean": (0.3 if s >= 17 else 0.8) + 0.01 * rng.standard_normal(),
        }
        for s in range(24)
    ]
    assert cli("ingest-metrics", str(_log(tmp_path / "m.jsonl", rows)), "--run", "s").code == 0


def test_events_spikes_coincide_and_kl_rises_before_the_reward_drop(
    store: Path, tmp_path: Path
) -> None:
    _spike_run(store, tmp_path)
    c = _report("s")["curves"]["s"]
    assert c["roles"] == {
        "grad_norm": "actor/grad_norm",
        "entropy": "actor/entropy",
        "reward": "critic/score/mean",
        "trainer_ppl": "trainer_ppl",
    }
    ev = c["events"]
    assert ev["vllm_kl_spikes"] == [7, 15]
    grad = next(m for m in ev["coincident_spikes"] if m["role"] == "grad_norm")
    assert grad["steps"] == [{"vllm_kl": 7, "metric": 7}, {"vllm_kl": 15, "metric": 15}]
    assert [d["step"] for d in ev["reward_drops"]] == [17]
    (rise,) = ev["vllm_kl_rise_before_reward_drop"]
    assert (rise["drop_step"], rise["kl_rise_step"]) == (17, 7)


def test_diagnose_reports_the_curve_events_with_steps(store: Path, tmp_path: Path) -> None:
    _spike_run(store, tmp_path)
    ran = cli("diagnose", "s", "--json", "-")
    doc = json.loads(ran.out)
    checks = {c["name"]: c for c in doc["diagnosis"]["checks"]}
    spikes = checks["curve_spikes"]
    assert spikes["verdict"] in ("warn", "fail")
    steps = {(f["step"], f["metric"]) for f in spikes["evidence"]["runs"]["s"]["coincident"]}
    assert {(7, "actor/grad_norm"), (15, "actor/grad_norm")} <= steps
    rise = checks["rise_before_drop"]
    assert rise["verdict"] in ("warn", "fail")
    assert "drops at step 17" in rise["finding"]


def test_diagnose_without_logs_uses_dump_curves_or_says_na(run12: Path) -> None:
    doc = json.loads(cli("diagnose", "r", "--json", "-").out)
    checks = {c["name"]: c for c in doc["diagnosis"]["checks"]}
    assert checks["curve_spikes"]["verdict"] == "n/a"
    assert "ingest-metrics" in checks["curve_spikes"]["next"]
    assert checks["rise_before_drop"]["verdict"] == "n/a"  # the dump has no rewards


def test_html_report_overlays_and_escapes_metric_names(run12: Path, tmp_path: Path) -> None:
    rows = [{"step": s, EVIL: float(s), "reward": 1.0 - s / 20} for s in range(12)]
    assert cli("ingest-metrics", str(_log(tmp_path / "m.jsonl", rows)), "--run", "r").code == 0
    out = tmp_path / "r.html"
    assert cli("report", "r", "--html", str(out)).code == 0
    page = out.read_text()
    assert 'id="curves-r"' in page and 'id="fig-curves-r"' in page and EVIL not in page
    figures = page_json_blocks(page)
    overlay = next(f for f in figures if any(t.get("name") == "vllm_kl" for t in f["data"]))
    names = [t["name"] for t in overlay["data"]]
    assert names[1] == "reward"  # the role curve first, visible
    assert overlay["layout"]["yaxis"]["type"] == "log"
    assert len(overlay["layout"]["updatemenus"][0]["buttons"]) == len(names) - 1


def test_compare_overlays_both_runs_curves(run12: Path, tmp_path: Path) -> None:
    multi_gpu_dump(tmp_path / "d2.parquet", seed=9)
    assert cli("ingest", str(tmp_path / "d2.parquet"), "--run", "r2").code == 0
    for run, scale in (("r", 1.0), ("r2", 2.0)):
        rows = [{"step": s, "grad_norm": scale * (1 + s)} for s in range(3, 12)]
        log = _log(tmp_path / f"{run}.jsonl", rows)
        assert cli("ingest-metrics", str(log), "--run", run).code == 0
    doc = json.loads(cli("compare", "r", "r2", "--json", "-").out)
    pairs = {p["metric"]: p for p in doc["comparison"]["curves"]}
    g = pairs["grad_norm"]
    assert g["common_steps"] == 9
    assert g["mean_b"] == pytest.approx(2 * g["mean_a"], rel=1e-12)
    assert g["ratio"] == pytest.approx(2.0, rel=1e-12)
    assert pairs["vllm_kl"]["common_steps"] == 12
    assert set(doc["curves"]) == {"a", "b"} and "grad_norm" in doc["curves"]["b"]["r2"]["columns"]
    text = cli("compare", "r", "r2").out
    assert "Training curves, aligned on step" in text and "grad_norm" in text
    out = tmp_path / "c.html"
    assert cli("compare", "r", "r2", "--html", str(out)).code == 0
    page = out.read_text()
    assert 'id="curve-pairs"' in page and 'id="fig-curve-0"' in page


def test_a_reward_drop_too_early_to_judge_is_not_assessed(run12: Path, tmp_path: Path) -> None:
    """12 steps: a drop at step 8 has no vllm_kl history before its 10-step look-back, so it is
    'not assessed', neither a rise nor 'no rise'."""
    rows = [{"step": s, "reward": 0.3 if s >= 8 else 0.8 + 0.001 * (s % 2)} for s in range(12)]
    assert cli("ingest-metrics", str(_log(tmp_path / "m.jsonl", rows)), "--run", "r").code == 0
    ev = _report("r")["curves"]["r"]["events"]
    assert [d["step"] for d in ev["reward_drops"]] == [8]
    assert ev["reward_drops_not_assessed"] == [8]
    assert ev["vllm_kl_rise_before_reward_drop"] == []
    assert "1 reward drop(s) not assessed for a vllm_kl rise" in cli("report", "r").out
    doc = json.loads(cli("diagnose", "r", "--json", "-").out)
    rise = next(c for c in doc["diagnosis"]["checks"] if c["name"] == "rise_before_drop")
    assert rise["verdict"] == "n/a" and "could not be assessed" in rise["finding"]


def test_runs_check_finds_a_damaged_metrics_file(run12: Path, tmp_path: Path) -> None:
    log = _log(tmp_path / "m.jsonl", [{"step": s, "loss": 1.0} for s in range(3)])
    assert cli("ingest-metrics", str(log), "--run", "r").code == 0
    (part,) = list((run12 / "metrics").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:20])
    ran = cli("runs", "check")
    assert ran.code != 0 and "metrics/run=r/" in ran.err + ran.out
    assert "ingest-metrics FILE --run r --replace" in ran.err + ran.out
    report = cli("report", "r")
    assert report.code != 0 and "metrics/run=r/" in report.err and "--replace" in report.err
