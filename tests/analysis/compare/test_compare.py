"""compare: selectors and their errors, exact side-by-side numbers, bootstrap intervals."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl.analysis.selectors import parse_selector
from mismatchctl.errors import UsageError
from mismatchctl.stats import reference_metrics
from tests.helpers import FIXTURES, cli


def _k3(r: np.ndarray) -> np.ndarray:
    return np.expm1(r) - r


def _double_k3(r: np.ndarray) -> np.ndarray:
    """r' > 0 with K3(r') = 2 K3(r), by Newton's method (K3 is increasing for r > 0)."""
    target, x = 2 * _k3(r), r * np.sqrt(2)
    for _ in range(50):
        x = x - (_k3(x) - target) / np.expm1(x)
    return x


def _pair(tmp: Path, n_seq: int = 300, steps: tuple[int, int] = (0, 0), seed: int = 1):
    """Runs a and b with identical rollout logprobs; b's per-token K3 is exactly twice a's."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(5, 40, n_seq)
    lr = [-(1.0 + rng.exponential(1.0, n)) for n in lens]
    ra = [rng.uniform(0.01, 0.3, n) for n in lens]
    sides = {
        "a": [x + r for x, r in zip(lr, ra, strict=True)],
        "b": [x + _double_k3(r) for x, r in zip(lr, ra, strict=True)],
    }
    paths = {}
    for side, lt in sides.items():
        table = pa.table(
            {
                "step": [steps[0] if side == "a" else steps[1]] * n_seq,
                "uid": [f"s{i}" for i in range(n_seq)],
                "rollout_log_probs": [x.tolist() for x in lr],
                "old_log_probs": [x.tolist() for x in lt],
            }
        )
        paths[side] = tmp / f"{side}.parquet"
        pq.write_table(table.replace_schema_metadata({"engine": f"vllm-{side}"}), paths[side])
    truth = {side: reference_metrics(list(zip(lr, lt, strict=True))) for side, lt in sides.items()}
    return paths, truth


@pytest.fixture
def pair(store: Path, tmp_path: Path) -> dict:
    paths, truth = _pair(tmp_path)
    for side, path in paths.items():
        mismatchctl.ingest(
            [path], run=side, tags={"gpu": "H20" if side == "a" else "L20"}, store=store
        )
    return truth


def _doc(*args: str) -> dict:
    ran = cli("compare", *args, "--json", "-", "-q", "--resamples", "300")
    assert ran.code == 0, ran.err
    return json.loads(ran.out)


def _row(doc: dict, metric: str) -> dict:
    return next(r for r in doc["comparison"]["headline"] if r["metric"] == metric)


def test_planted_double_is_exact_and_detected(pair: dict) -> None:
    doc = _doc("a", "b")
    kl = _row(doc, "vllm_kl")
    assert kl["a"] == pytest.approx(pair["a"]["vllm_kl"], rel=1e-12)
    assert kl["ratio"] == pytest.approx(2.0, rel=1e-12)
    assert kl["significant"] is True and kl["ci_low"] < 2.0 < kl["ci_high"]
    assert kl["ci_low"] > 1.0
    assert kl["verdict"].startswith("b's vllm_kl is 2x a's (95% CI ")
    diff = {r["key"]: (r["a"], r["b"]) for r in doc["comparison"]["config_diff"]}
    assert diff == {"engine": ("vllm-a", "vllm-b"), "gpu (rows)": ("H20", "L20"), "run": ("a", "b")}
    for row in doc["comparison"]["bins"]:
        if row["a_tokens"]:
            assert row["vllm_kl_ratio"] == pytest.approx(2.0, rel=1e-9)
    gap = doc["comparison"]["gap"]
    assert sum(c["share_of_gap"] for c in gap) == pytest.approx(1.0, abs=1e-9) or len(gap) == 5
    sides = {g["by"]["side"] for g in doc["groups"]}
    assert sides == {"a", "b"}


def test_identical_sides_are_said_so(pair: dict, store: Path) -> None:
    """Both sides holding the same data: "identical: no difference", exit code 0, and what both
    hold (a user checking two copies); no bootstrap interval, no side-by-side tables."""
    from mismatchctl.analysis.compare.same import SAME_PARTS, SAME_SEQUENCES, Identical

    same = mismatchctl.compare("a", "a", store=store)
    assert isinstance(same, Identical) and same.basis == SAME_PARTS  # known from the catalog
    assert same.metrics["vllm_kl"] == pytest.approx(pair["a"]["vllm_kl"], rel=1e-12)
    assert same.metrics["tokens"] == pair["a"]["tokens"]
    # other selectors that resolve to the same rows: found once both are read
    cases = [("a", "run=a"), ("a", "gpu=H20"), ("a@steps=0..", "a"), ("b", "run=b,gpu=L20")]
    for x, y in cases:
        ran = cli("compare", x, y, "-q", "--resamples", "50")
        assert ran.code == 0 and ran.err == "", (x, y, ran.err)
        assert f"identical: no difference. `{x}` and `{y}` hold the same data" in ran.out
        assert "CI" not in ran.out and "Headline" not in ran.out
    # a second run of the same file holds the same data too: the same sequences, bit for bit
    mismatchctl.ingest([store.parent / "a.parquet"], run="a2", store=store)
    copy = mismatchctl.compare("a", "a2", store=store)
    assert isinstance(copy, Identical) and copy.basis == SAME_SEQUENCES
    ran = cli("compare", "a", "a2", "-q", "--json", "-")
    assert ran.code == 0
    doc = json.loads(ran.out)
    assert doc["comparison"]["identical"] is True and doc["comparison"]["basis"] == SAME_SEQUENCES
    assert doc["comparison"]["metrics"]["sequences"] == pair["a"]["sequences"]
    assert set(doc["runs"]) == {"a", "a2"} and doc["runs"]["a"]["tokens"] == pair["a"]["tokens"]
    assert copy.to_polars().height == len(doc["comparison"]["metrics"])
    other = _doc("a", "b")["comparison"]
    assert other["identical"] is False and other["same_logprobs"] is False


def test_bootstrap_is_seeded(pair: dict) -> None:
    one, two = _doc("a", "b"), _doc("a", "b")
    assert _row(one, "vllm_kl")["ci_low"] == _row(two, "vllm_kl")["ci_low"]


def test_both_sides_are_read_in_one_pass(pair: dict, store: Path, monkeypatch) -> None:
    """The engine reads the two sides' parts in one pass (one pool, side A's parts then B's),
    and the intervals are those of the sides' own seeded bootstraps."""
    from mismatchctl.engines import choice
    from mismatchctl.engines import local as local_engine
    from mismatchctl.stats.bootstrap import compare_intervals

    calls: list[list[str]] = []

    def counted(reads, *args, **kwargs):
        calls.append([task.run for read in reads for task in read.tasks])
        return local_engine.run_reads(reads, *args, **kwargs)

    monkeypatch.setattr(choice, "run_reads", counted)
    result = mismatchctl.compare("a", "b", store=store, resamples=200, seed=7)
    assert len(calls) == 1 and set(calls[0][:1]) == {"a"} and calls[0][-1] == "b"
    want = compare_intervals(
        result.a.extra_states[0], result.b.extra_states[0], resamples=200, seed=7
    )
    got = {row.metric: (row.ci_low, row.ci_high) for row in result.headline if row.ci_of}
    assert got == {m: (iv.low, iv.high) for m, iv in want.items()}


def test_slices_by_gpu_tag(pair: dict) -> None:
    doc = _doc("gpu=H20", "gpu=L20")
    assert _row(doc, "vllm_kl")["ratio"] == pytest.approx(2.0, rel=1e-12)


def test_disjoint_steps(store: Path, tmp_path: Path) -> None:
    paths, _ = _pair(tmp_path, n_seq=50, steps=(1, 2))
    for side, path in paths.items():
        mismatchctl.ingest([path], run=side, store=store)
    doc = _doc("a", "b")
    assert [s["step"] for s in doc["comparison"]["steps"]] == [1, 2]
    assert doc["comparison"]["notes"][0].startswith("the two sides share no step")
    assert _row(doc, "vllm_kl")["ratio"] == pytest.approx(2.0, rel=1e-12)
    ran = cli("compare", "a", "b", "-q", "--resamples", "50")
    assert "note: the two sides share no step" in ran.out


def test_step_range_suffix(store: Path) -> None:
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="s", store=store)
    doc = _doc("s@steps=3", "s@steps=4-")
    assert doc["comparison"]["a"] == "s@steps=3"
    assert [s["step"] for s in doc["comparison"]["steps"]] == [3, 4]
    diff = {r["key"]: (r["a"], r["b"]) for r in doc["comparison"]["config_diff"]}
    assert diff == {"steps": ("3", "4..")}


@pytest.mark.parametrize(
    ("text", "run", "gpu", "tags", "steps"),
    [
        ("v0-ref", "v0-ref", None, {}, None),
        ("gpu=A100", None, "A100", {}, None),
        ("run=x,gpu=y,engine=vllm", "x", "y", {"engine": "vllm"}, None),
        ("v1@steps=0-200", "v1", None, {}, (0, 200)),
        ("gpu=H20@steps=5", None, "H20", {}, (5, 5)),
    ],
)
def test_parse_selector(text, run, gpu, tags, steps) -> None:
    sel = parse_selector(text)
    assert (sel.run, sel.gpu, sel.tags) == (run, gpu, tags)
    assert (None if sel.steps is None else (sel.steps.lo, sel.steps.hi)) == steps


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu", None),
        ("gpu=", "selector `gpu=`: `gpu=` is not KEY=VALUE"),
        ("a@step=1", "selector `a@step=1`: `@step=1` is not a step range"),
        ("a@steps=9-1", "selector `a@steps=9-1`: step range `9-1` is empty (9 > 1)"),
        ("@steps=1", "selector `@steps=1` names no run"),
    ],
)
def test_bad_selectors(text: str, message: str | None) -> None:
    if message is None:
        assert parse_selector(text).run == "gpu"  # a bare word is a run name
        return
    with pytest.raises(UsageError) as err:
        parse_selector(text)
    assert err.value.message == message


def test_unknown_things_list_what_exists(pair: dict, store: Path) -> None:
    cases = {
        ("nope", "a"): f"Error: selector `nope`: no run `nope` in the store {store} (runs: a, b)",
        ("gpu=A100", "a"): "Error: selector `gpu=A100`: no rows with gpu=A100 (gpus: H20, L20)",
        ("engine=sglang", "a"): "Error: selector `engine=sglang`: no data with engine=sglang "
        "(values: vllm-a, vllm-b)",
        ("colour=red", "a"): "Error: selector `colour=red`: no source has a tag `colour` "
        "(tags: run, gpu, engine)",
        ("a@steps=50-60", "b"): "Error: selector `a@steps=50-60` matches no model tokens "
        "(run a holds steps 0)",
    }
    for args, message in cases.items():
        ran = cli("compare", *args, "-q")
        assert ran.code == 1
        assert ran.err.splitlines()[0] == message


def test_html_comparison(pair: dict, tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    ran = cli("compare", "a", "b", "--html", str(out), "-q", "--resamples", "50")
    assert ran.code == 0, ran.err
    page = out.read_text()
    for anchor in ("headline", "verdicts", "config", "fig-steps", "by-turn_kind", "bins", "gap"):
        assert f'id="{anchor}"' in page
    assert 'id="scatter-a"' in page and 'id="scatter-b"' in page
    assert page.count("* plotly.js v") == 1  # plotly.js inlined exactly once
    assert "b&#x27;s vllm_kl is 2x a&#x27;s" in page
    assert 'src="http' not in page
    assert len(page) < 10_000_000


def _cells(text: str, metric: str) -> list[str]:
    """The cells of a metric's row in a terminal table."""
    line = next(x for x in text.splitlines() if x.startswith(f"│ {metric} "))
    return [c.strip() for c in line.strip("│").split("│")]


def test_headline_numbers_are_written_as_report_writes_them(pair: dict, monkeypatch) -> None:
    """One format per metric: the registry's. A correlation has 6 significant digits in the
    compare headline as in report (compare wrote prob_pearson 0.99995 as `1`), a count has its
    thousands separator; the difference keeps 4 digits."""
    from mismatchctl.display import number

    monkeypatch.setenv("COLUMNS", "200")
    text = cli("compare", "a", "b", "-q", "--resamples", "50").out
    report = cli("report", "a", "-q").out
    for metric in ("prob_pearson", "log_ppl_pearson"):
        a, b = pair["a"][metric], pair["b"][metric]
        assert number(a) != number(a, 6)  # 4 digits would cut it
        assert _cells(text, metric)[1:3] == [number(a, 6), number(b, 6)]
    fact = next(x.split() for x in report.splitlines() if x.startswith("prob_pearson "))
    assert fact == ["prob_pearson", number(pair["a"]["prob_pearson"], 6)]
    assert _cells(text, "tokens")[1] == f"{pair['a']['tokens']:,}"


def test_side_b_is_drawn_while_its_report_is_made_whole(pair: dict, store: Path, monkeypatch):
    """Side B's bootstrap starts as soon as its parts are read, on the bootstrap's thread,
    while the main thread makes side B's report whole: the finishing of side B waits here
    until side B's draws have begun (it would wait in vain if they began only after it)."""
    from mismatchctl.analysis.compare import compare as compare_module
    from mismatchctl.analysis.report import report as report_module

    drawing_b, waited = threading.Event(), []
    draws, finish = compare_module.draws, report_module._finish

    def marked(sums, resamples, rng, ahead=False):
        if ahead:  # side B's (side A's are drawn while side B is read)
            drawing_b.set()
        return draws(sums, resamples, rng, ahead)

    def finishing(plan, *folded):
        if plan.selection.names == ["b"]:
            waited.append(drawing_b.wait(timeout=30))
        return finish(plan, *folded)

    monkeypatch.setattr(compare_module, "draws", marked)
    monkeypatch.setattr(report_module, "_finish", finishing)
    result = mismatchctl.compare("a", "b", store=store, resamples=200, seed=7)
    assert waited == [True]
    monkeypatch.undo()
    alone = mismatchctl.compare("a", "b", store=store, resamples=200, seed=7)
    assert result.to_dict() == alone.to_dict()
