"""`mismatchctl explain` end to end: the numbers against numpy on the raw dumps, the findings
on planted causes, the terminal, JSON and HTML outputs and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from tests.helpers import cli
from tests.planted import Plan, write

REL = 1e-9


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("explain")
    for name, plan in {
        "base": Plan("clean", per_step=24, seed=2),
        "hot": Plan("gpu", per_step=24, seed=7, factor=30),
    }.items():
        mismatchctl.ingest([write(plan, root / f"{name}.parquet", weight_version=False)],
                           run=name, store=root / "store")  # fmt: skip
    return root / "store"


def _k3(store: Path, run: str) -> tuple[np.ndarray, np.ndarray]:
    """Every model token's K3 and its gpu, from the dump as written (numpy, not our reader)."""
    table = pq.read_table(store.parent / f"{run}.parquet").to_pylist()
    k3, gpu = [], []
    for row in table:
        m = np.array(row["response_mask"], bool)
        r = np.array(row["old_log_probs"])[m] - np.array(row["rollout_log_probs"])[m]
        k3.append(np.expm1(r) - r)
        gpu += [row["gpu"]] * int(m.sum())
    return np.concatenate(k3), np.array(gpu)


def test_levels_and_decomposition_agree_with_numpy(store: Path) -> None:
    e = api.explain("hot", "base", store=store, bootstrap=False).explanation
    hot, _ = _k3(store, "hot")
    base, _ = _k3(store, "base")
    assert e.vllm_kl == pytest.approx(hot.mean(), rel=REL)
    assert e.baseline_vllm_kl == pytest.approx(base.mean(), rel=REL)
    assert e.tokens == len(hot)
    for d in e.decomposition:  # mix + rate + interaction = the change, exactly, on every dim
        assert d.total == pytest.approx(hot.mean() - base.mean(), rel=REL)
        assert d.mix + d.rate + d.interaction == pytest.approx(d.total, rel=1e-9, abs=1e-15)


def test_the_hot_gpu_is_the_top_finding(store: Path) -> None:
    ex = api.explain("hot", "base", store=store)
    top = ex.explanation.findings[0]
    assert top.where == {"gpu": "A100"}
    k3, gpu = _k3(store, "hot")
    assert top.tokens == int((gpu == "A100").sum())
    assert top.rate_ratio_ci[0] > 3 and top.excess_share > 0.8
    lo, hi = ex.intervals[0].rate_ratio_ci  # the sequence-bootstrap interval
    assert lo < top.rate_ratio < hi
    internal = api.explain("hot", store=store, bootstrap=False).explanation
    assert internal.findings[0].where == {"gpu": "A100"}
    assert internal.findings[0].mass_share == pytest.approx(k3[gpu == "A100"].sum() / k3.sum())


def test_cli_terminal_json_html(store: Path, tmp_path: Path) -> None:
    ran = cli("explain", "hot", "--baseline", "base", "--store", str(store), "-q")
    assert ran.code == 0, ran.err
    assert "gpu A100" in ran.out and "mix" in ran.out
    ran = cli("explain", "hot", "-b", "base", "--store", str(store), "--json", "-", "-q",
              "--no-bootstrap", "--html", str(tmp_path / "e.html"))  # fmt: skip
    out = json.loads(ran.out)["explain"]
    assert out["target"] == "hot" and out["baseline"] == "base" and out["mode"] == "baseline"
    f = out["findings"][0]
    assert f["where"] == {"gpu": "A100"} and f["rate_ratio_ci"][0] > 1
    assert {"token_share", "excess_share", "rate_ratio", "sentence"} <= set(f)
    assert {d["dim"] for d in out["decomposition"]} >= {"step", "gpu", "bin"}
    html = (tmp_path / "e.html").read_text()
    assert "A100" in html and "<script" in html


def test_errors_name_the_selector(store: Path) -> None:
    bad = cli("explain", "hot", "--baseline", "nope", "--store", str(store))
    assert bad.code == 1 and "`nope`" in bad.err and "Hint:" in bad.err
    same = cli("explain", "hot", "--baseline", "hot", "--store", str(store))
    assert same.code != 0 and "Hint:" in same.err


def _with_sources(plan: Plan, path: Path, hot: str | None) -> Path:
    """The planted dump with a ``data_source`` per response (three sources, mixed in every
    step); ``hot``: that source's responses get a trainer side 5x further from the rollout's
    (its tokens' K3 about 25x); ``env``: 20 values, more than the catalog counts one by one
    (those beyond its most frequent are the cube's ``(other)``)."""
    import pyarrow as pa

    from tests.planted import rows

    out = []
    for i, row in enumerate(rows(plan)):
        source = ("gsm8k", "math", "search")[i % 3]
        if source == hot:
            lr, lt = np.array(row["rollout_log_probs"]), np.array(row["old_log_probs"])
            row["old_log_probs"] = (lr + 5.0 * (lt - lr)).tolist()
        out.append({**row, "data_source": source, "env": f"env-{i % 20}"})
    pq.write_table(pa.Table.from_pylist(out), path)
    return path


@pytest.mark.slow
def test_a_data_source_is_a_dimension_of_explain_and_diagnose(tmp_path: Path) -> None:
    plan = Plan("clean", per_step=24, seed=5)
    store = tmp_path / "store"
    for name, hot in (("mixed", "search"), ("plain", None)):
        dump = _with_sources(plan, tmp_path / f"{name}.parquet", hot)
        mismatchctl.ingest([dump], run=name, store=store)
    top = api.explain("mixed", store=store, bootstrap=False).explanation.findings[0]
    assert top.where == {"attr:data_source": "search"}
    against = api.explain("mixed", "plain", store=store, bootstrap=False).explanation
    assert against.findings[0].where == {"attr:data_source": "search"}
    local = next(c for c in api.diagnose("mixed", store=store).checks if c.name == "localized")
    (run,) = local.evidence.runs.values()
    assert run.code_path_findings[0].where == {"attr:data_source": "search"}
    assert "attr:data_source" in local.finding
    from mismatchctl.analysis.explain import OTHER_LABEL, attribute_dims
    from mismatchctl.analysis.selection import parse_selector, resolve
    from mismatchctl.store import open_store

    dims = {
        d.name: d for d in attribute_dims([resolve(open_store(store), parse_selector("mixed"))])
    }
    assert set(dims["attr:data_source"].labels) == {
        "gsm8k",
        "math",
        "search",
        "(none)",
        OTHER_LABEL,
    }
    assert OTHER_LABEL in dims["attr:env"].labels and dims["attr:env"].size <= 17


FAULTY = Path(__file__).parents[2] / "sample_data" / "runs" / "faulty-attn"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The captured run faulty-attn's steps 1-3 (step 3 spikes) as run `fa`."""
    store = tmp_path_factory.mktemp("faulty") / "store"
    mismatchctl.ingest([FAULTY / f"step_000{s}.parquet" for s in (1, 2, 3)], run="fa", store=store)
    return store


def _later_k3(step: int) -> np.ndarray:
    """K3 of the tokens at positions 16-63 of the turns after a tool response (turns: runs of
    the response mask), from the dump as written."""
    out = []
    for row in pq.read_table(FAULTY / f"step_000{step}.parquet").to_pylist():
        mask = np.array(row["response_mask"], bool)
        r = np.array(row["old_log_probs"]) - np.array(row["rollout_log_probs"])
        starts = np.flatnonzero(mask & ~np.r_[False, mask[:-1]])  # each turn's first position
        for start in starts[1:]:
            end = start + np.argmin(np.r_[mask[start:], False])
            part = r[start + 16 : min(end, start + 64)]
            out.append(np.expm1(part) - part)
    return np.concatenate(out)


def test_a_spike_that_few_sequences_carry_comes_with_its_cells(faulty: Path) -> None:
    """faulty-attn's step 3 is 393x steps 1-2, all of it in the few sequences still decoding
    when its split-KV merge bug runs (< 10 active): too few sequences' worth for a finding, so
    the cells that carry it are reported as leads, never "no cell is hotter" beside 393x."""
    args = ("explain", "fa@steps=3", "--baseline", "fa@steps=1..2", "--store", str(faulty), "-q")
    ran = cli(*args)
    assert ran.code == 0, ran.err
    text = " ".join(ran.out.split())
    assert "significantly hotter" not in text
    assert (
        "the selection is 393x the baseline's rate (95% CI 205-753), and the cells below carry"
        in text
    )
    assert "Findings: held by a few sequences" in text
    assert "held by 7.6 sequences' worth of K3, fewer than the 10 a finding needs" in text
    doc = json.loads(cli(*args, "--json", "-").out)["explain"]
    assert doc["located"] == "few_sequences" and doc["findings"] == []
    assert doc["effective_sequences"] == pytest.approx(7.575, abs=1e-3)
    lead = doc["leads"][0]
    assert lead["where"] == {"turn_kind": "later", "turn_position": "16-63"}
    assert 3 <= lead["effective_sequences"] < 10 and lead["excess_share"] > 0.95
    hot, before = _later_k3(3), np.concatenate([_later_k3(1), _later_k3(2)])
    assert lead["tokens"] == len(hot)
    ratio = hot.mean() / before.mean()  # raw; the lead's is at the same token mix
    assert lead["rate_ratio_ci"][0] < ratio < lead["rate_ratio_ci"][1]
