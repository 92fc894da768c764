"""compare's paired comparison: the same responses scored twice pair sequence by sequence (exact
numbers against numpy on the dumps' arrays, the paired bootstrap with its documented
generator); other responses, a side without token ids, sides without a common step do not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import api
from mismatchctl.analysis.pairing.pairing import MIN_PAIRS, TOP_DIFFERENCES
from mismatchctl.stats.bootstrap import CHUNK, paired_generator
from tests.analysis.pairing.paired_data import (
    Written,
    changed,
    read_back,
    responses,
    shuffled_groups,
    trainer_of,
    write,
)
from tests.helpers import cli

REL = 1e-9


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Runs over one set of responses: `a`, `b` (another trainer; each prompt group written in
    another order), `half` (every other response changed), `other` (every response changed),
    `few` (all but the first group's 4 changed), `noids` (b without token ids), `later` (b's
    responses at other steps)."""
    base = tmp_path_factory.mktemp("paired")
    resp = responses(seed=3)
    dirs = {
        "a": write(base / "a", resp, trainer_of(resp, 1, 0.05)),
        "b": write(base / "b", resp, trainer_of(resp, 2, 0.15), order=shuffled_groups(resp, 5)),
        "half": write(base / "half", changed(resp, 2), trainer_of(resp, 2, 0.15)),
        "other": write(base / "other", changed(resp), trainer_of(resp, 2, 0.15)),
        "few": write(base / "few", resp[:4] + changed(resp)[4:], trainer_of(resp, 2, 0.15)),
        "noids": write(base / "noids", resp, trainer_of(resp, 2, 0.15), ids=False),
    }
    for r in resp:
        r.step += 10
    dirs["later"] = write(base / "later", resp, trainer_of(resp, 2, 0.15))
    store = base / "store"
    for name, directory in dirs.items():
        api.ingest([str(directory)], name, store=store)
    return store, dirs


def _reference_pairs(a: list[Written], b: list[Written]) -> list[tuple[int, int]]:
    """In A's order, each sequence with the first unused sequence of B of the same step,
    sample id, token ids and positions."""
    used: set[int] = set()
    out = []
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            same = (x.step, x.uid, x.ids, x.positions) == (y.step, y.uid, y.ids, y.positions)
            if j not in used and same:
                used.add(j)
                out.append((i, j))
                break
    return out


def _reference(a: list[Written], b: list[Written], resamples: int, seed: int) -> dict:
    pairs = _reference_pairs(a, b)
    t = np.array([a[i].tokens for i, _ in pairs], dtype=np.float64)
    k3a = np.array([a[i].k3 for i, _ in pairs])
    k3b = np.array([b[j].k3 for _, j in pairs])
    rng = paired_generator(seed)
    diff, ratio = [], []
    for done in range(0, resamples, CHUNK):  # the documented draws, a chunk at a time
        picks = rng.integers(0, len(t), size=(min(CHUNK, resamples - done), len(t)), dtype=np.int32)
        for row in picks:
            w = np.bincount(row, minlength=len(t)).astype(np.float64)
            diff.append((w @ k3b - w @ k3a) / (w @ t))
            ratio.append((w @ k3b) / (w @ k3a))
    d = k3b / t - k3a / t
    return {
        "pairs": pairs,
        "vllm_kl_a": k3a.sum() / t.sum(),
        "vllm_kl_b": k3b.sum() / t.sum(),
        "difference_ci": np.percentile(diff, [2.5, 97.5]),
        "ratio_ci": np.percentile(ratio, [2.5, 97.5]),
        "d": d,
    }


def _paired(store: Path, a: str, b: str, *extra: str) -> dict:
    ran = cli("compare", a, b, "--store", str(store), "--json", "-", "-q", *extra)
    assert ran.code == 0, ran.err
    return json.loads(ran.out)["comparison"]["paired"]


def test_the_same_responses_pair_with_exact_numbers(paired: tuple[Path, dict[str, Path]]) -> None:
    store, dirs = paired
    got = _paired(store, "a", "b", "--resamples", "120", "--seed", "7")
    a, b = read_back(dirs["a"]), read_back(dirs["b"])
    want = _reference(a, b, 120, 7)
    assert got["paired"] is True and got["reason"] is None
    n = len(a)
    assert len(want["pairs"]) == n == got["pairs"] == got["comparable"] == 48
    assert got["identical_share"] == 1.0 and got["sequences_a"] == got["sequences_b"] == n
    # the same rollouts, only the trainer differs; but a group's two equal responses were
    # sampled apart (their rollout logprobs differ), and b's order pairs some of them crosswise
    same = sum(a[i].rollout == b[j].rollout for i, j in want["pairs"])
    assert got["same_rollout"] == same and n - 16 <= same < n
    assert got["vllm_kl_a"] == pytest.approx(want["vllm_kl_a"], rel=REL)
    assert got["vllm_kl_b"] == pytest.approx(want["vllm_kl_b"], rel=REL)
    assert got["difference"] == pytest.approx(want["vllm_kl_b"] - want["vllm_kl_a"], rel=REL)
    assert got["ratio"] == pytest.approx(want["vllm_kl_b"] / want["vllm_kl_a"], rel=REL)
    np.testing.assert_allclose(got["difference_ci"], want["difference_ci"], rtol=REL)
    np.testing.assert_allclose(got["ratio_ci"], want["ratio_ci"], rtol=REL)
    assert got["significant"] is True and got["difference_ci"][0] > 0
    assert (got["resamples"], got["seed"]) == (120, 7)
    d = want["d"]
    q = np.quantile(d, [0.05, 0.5, 0.95])
    per = got["per_sequence"]
    assert per["finite"] == n
    assert [per["p05"], per["median"], per["p95"]] == pytest.approx(q.tolist(), rel=REL)
    assert per["mean"] == pytest.approx(d.mean(), rel=REL)
    assert per["b_higher_share"] == pytest.approx((d > 0).mean())
    order = np.lexsort((np.arange(n), -np.abs(d)))[:TOP_DIFFERENCES]
    assert len(got["top"]) == TOP_DIFFERENCES
    for row, j in zip(got["top"], order.tolist(), strict=True):
        i, k = want["pairs"][j]
        assert (row["step"], row["sample_id"]) == (a[i].step, a[i].uid)
        assert (row["seq_a"], row["seq_b"]) == (i, k)  # seq ids follow the dump order
        assert row["difference"] == pytest.approx(d[j], rel=REL)


def test_groups_dumped_in_another_order_pair_by_content(
    paired: tuple[Path, dict[str, Path]],
) -> None:
    """Each group of b is in another order: the k-th of a pairs with its equal response in b,
    not with b's k-th (the repeated response inside each group pairs in order)."""
    store, dirs = paired
    got = _paired(store, "a", "b", "--resamples", "20")
    a, b = read_back(dirs["a"]), read_back(dirs["b"])
    moved = [(i, j) for i, j in _reference_pairs(a, b) if i != j]
    assert moved  # the shuffle moved responses
    top = {(r["seq_a"], r["seq_b"]) for r in got["top"]}
    assert top <= set(_reference_pairs(a, b))


def test_half_the_responses_pair_and_the_numbers_cover_them(
    paired: tuple[Path, dict[str, Path]],
) -> None:
    store, dirs = paired
    got = _paired(store, "a", "half", "--resamples", "50")
    a, h = read_back(dirs["a"]), read_back(dirs["half"])
    want = _reference(a, h, 50, 0)
    assert got["paired"] and got["pairs"] == len(want["pairs"])
    # the repeat inside each group may find its twin among the unchanged ones
    assert 24 <= got["pairs"] < 48 and got["comparable"] == 48
    assert got["identical_share"] == pytest.approx(got["pairs"] / 48)
    assert got["vllm_kl_b"] == pytest.approx(want["vllm_kl_b"], rel=REL)
    np.testing.assert_allclose(got["difference_ci"], want["difference_ci"], rtol=REL)


def test_other_responses_do_not_pair_and_say_why(paired: tuple[Path, dict[str, Path]]) -> None:
    store, _ = paired
    got = _paired(store, "a", "other", "--resamples", "20")
    assert got["paired"] is False and got["pairs"] == 0
    assert got["reason"] == (
        "0 of 48 sequences with the same step and sample id on both sides have the same token ids"
    )
    assert got["vllm_kl_a"] is None and got["top"] == []
    ran = cli("compare", "a", "other", "--store", str(store), "--resamples", "20")
    assert ran.code == 0, ran.err
    assert "Paired comparison: none: 0 of 48 sequences with the same step" in ran.out


def test_a_side_without_token_ids_or_a_common_step_is_named(
    paired: tuple[Path, dict[str, Path]],
) -> None:
    store, _ = paired
    got = _paired(store, "a", "noids", "--resamples", "20")
    assert got == {**got, "paired": False, "pairs": 0}
    assert got["reason"] == "token ids not stored: side B (`noids`) has no token-id column"
    got = _paired(store, "later", "a", "--resamples", "20")
    assert got["reason"] == "the two sides share no step"
    got = _paired(store, "a@steps=0", "b@steps=1..2", "--resamples", "20")
    assert got["reason"] == "the two sides share no step"


def test_too_few_pairs_are_not_a_paired_comparison(paired: tuple[Path, dict[str, Path]]) -> None:
    store, _ = paired
    got = _paired(store, "a", "few", "--resamples", "20")
    assert (got["comparable"], got["pairs"], got["paired"]) == (48, 4, False)
    assert got["pairs"] < MIN_PAIRS
    assert got["reason"] == (
        "4 of 48 sequences with the same step and sample id on both sides have the same token "
        f"ids (a paired comparison needs at least {MIN_PAIRS})"
    )


def test_the_html_page_and_terminal_say_it(
    paired: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    store, _ = paired
    page = tmp_path / "cmp.html"
    ran = cli("compare", "a", "b", "--store", str(store), "--resamples", "30", "--html", str(page))
    assert ran.code == 0, ran.err
    assert "Paired comparison (the same responses on both sides)" in ran.out
    assert (
        "paired: b's vllm_kl is" in ran.out
        and "higher than a's on the same 48 responses" in ran.out
    )
    assert "Pairs that differ most" in ran.out
    html = page.read_text()
    assert 'id="paired"' in html and "Pairs that differ most" in html
