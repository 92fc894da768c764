"""Generated dumps (hypothesis): ingest succeeds with exactly the right counts and values, or fails
with a clear error naming the file, and leaves the store byte-for-byte as it was. Never a
traceback, never a partial run.

Each dump is drawn as abstract samples (rollout, trainer and mask lists), with ragged and
mismatched lengths, NaN/inf, positive logprobs, empty and long lists and unicode sample ids, then
written as a Parquet sequence file (with a random value dtype and odd column names), a NeMo-RL
JSON lines file or a slime ``.pt``. An independent oracle says what the ingest must do.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mismatchctl
from mismatchctl import schema as S
from mismatchctl.errors import MismatchError
from mismatchctl.stats.sentinels import PAD_RUN_MIN
from tests.helpers import FIXTURES, examples, tree_digest

SETTINGS = settings(
    max_examples=examples(50),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
VALID = st.floats(-60.0, 0.0, allow_nan=False)
HOSTILE = st.sampled_from(
    [math.nan, math.inf, -math.inf, 0.5, 1e-4, 2e-4, -700.0, -1e-300, 0.0, -0.0, 3.0]
)
ODD_NAMES = ["ロールアウト lp", "with space", "tab\there", "x" * 300, "🙂", "a.b[0]"]


@dataclass
class Sample:
    sample_id: str
    rollout: list[float]
    trainer: list[float]
    mask: list[int] | None


@st.composite
def samples(draw: st.DrawFn) -> list[Sample]:
    with_mask = draw(st.booleans())
    n = draw(st.integers(0, 5))
    out = []
    for i in range(n):
        length = draw(st.sampled_from([0, 1, 2, 3, 8, 40]))
        values = st.one_of(VALID, HOSTILE) if draw(st.integers(0, 3)) == 0 else VALID
        roll = draw(st.lists(values, min_size=length, max_size=length))
        other = length + draw(st.sampled_from([0, 0, 0, 0, 0, 1, -1])) if length else length
        train = draw(st.lists(values, min_size=max(other, 0), max_size=max(other, 0)))
        mask = None
        if with_mask:
            bits = st.sampled_from([0, 1, 1, 1]) | st.sampled_from([0, 1, 2])
            mlen = length + draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1]))
            mask = draw(st.lists(bits, min_size=mlen, max_size=mlen))
        sid = draw(st.text(min_size=0, max_size=12)) or f"s{i}"
        out.append(Sample(f"{i}:{sid}", roll, train, mask))
    if out and draw(st.integers(0, 4)) == 0:
        out.append(_huge(draw(st.integers(0, 2**32)), draw(HOSTILE | VALID), with_mask))
    return out


def _huge(seed: int, planted: float, with_mask: bool) -> Sample:
    """A long response (drawn with numpy: element-wise drawing of 20k values is too slow), with
    one drawn value planted somewhere in it."""
    rng = np.random.default_rng(seed)
    n = 20_000
    roll = (-rng.exponential(1.0, n)).tolist()
    train = (np.asarray(roll) + rng.normal(0, 0.01, n)).clip(max=0.0).tolist()
    roll[int(rng.integers(n))] = planted
    mask = rng.choice([0, 1], n, p=[0.2, 0.8]).tolist() if with_mask else None
    return Sample(f"huge-{seed}", roll, train, mask)


def oracle(dump: list[Sample], dtype: str, skip_bad: bool) -> dict | str:
    """The counts a correct ingest reports, or the start of the error it must raise."""
    if not dump:
        return "holds no samples"
    if dtype == "string":
        return "expected numbers"
    if any(s.mask is not None and set(s.mask) - {0, 1} for s in dump):
        return "mask"
    kept, dropped = [], 0
    for s in dump:
        roll, train = _as_stored(s.rollout, dtype), _as_stored(s.trainer, dtype)
        lengths_ok = len(train) == len(roll) and (s.mask is None or len(s.mask) == len(roll))
        model = np.ones(len(roll), bool) if s.mask is None else np.array(s.mask[: len(roll)]) == 1
        ok = lengths_ok and all(
            np.all(np.isfinite(v[model]) & (v[model] <= S.LOGPROB_MAX)) for v in (roll, train)
        )
        ok = ok and not CONTROL.search(s.sample_id)  # ids are shown in terminals
        if ok:
            kept.append((s, roll[model], train[model]))
        elif not skip_bad:
            return "sample"
        else:
            dropped += 1
    if any(s.mask is None and _trailing_zeros(r, t) >= PAD_RUN_MIN for s, r, t in kept):
        return "end in padding"  # a dump without mask whose samples end in 0.0 on both sides
    return {
        "sequences": len(kept),
        "dropped": dropped,
        "model_tokens": sum(len(r) for _, r, _ in kept),
        "empty": sum(len(r) == 0 for _, r, _ in kept),
        "rollout": np.concatenate([r for _, r, _ in kept] or [np.zeros(0)]),
        "trainer": np.concatenate([t for _, _, t in kept] or [np.zeros(0)]),
    }


def _trailing_zeros(roll: np.ndarray, train: np.ndarray) -> int:
    """How many of the last positions are exactly 0.0 on both sides, in a row."""
    run = 0
    for r, t in zip(roll[::-1], train[::-1], strict=True):
        if r != 0.0 or t != 0.0:
            break
        run += 1
    return run


def _as_stored(values: list[float], dtype: str) -> np.ndarray:
    if dtype == "float32":
        return np.array(values, dtype=np.float32).astype(np.float64)
    return np.array(values, dtype=np.float64)


def write_parquet(dump: list[Sample], path: Path, dtype: str, names: tuple[str, str]) -> Path:
    value_type = {"float64": pa.float64(), "float32": pa.float32(), "string": pa.string()}[dtype]

    def col(lists: list[list[float]]) -> pa.Array:
        if dtype == "string":
            return pa.array([[str(v) for v in x] for x in lists], pa.list_(value_type))
        return pa.array(lists, pa.list_(value_type))

    cols = {
        "uid": pa.array([s.sample_id for s in dump], pa.string()),
        names[0]: col([s.rollout for s in dump]),
        names[1]: col([s.trainer for s in dump]),
    }
    if dump and dump[0].mask is not None:
        cols["response_mask"] = pa.array([s.mask for s in dump], pa.list_(pa.int8()))
    pq.write_table(pa.table(cols), path)
    return path


def write_jsonl(dump: list[Sample], path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for s in dump:
            obj: dict = {
                "sample_id": s.sample_id,
                "generation_logprobs": s.rollout,
                "prev_logprobs": s.trainer,
            }
            if s.mask is not None:
                obj["token_loss_mask"] = s.mask
            fh.write(json.dumps(obj) + "\n")  # NaN and Infinity as the JSON extensions
    return path


def write_pt(dump: list[Sample], path: Path, as_tensors: bool) -> Path:
    torch = pytest.importorskip("torch")

    def val(x: list[float]) -> object:
        return torch.tensor(x, dtype=torch.float64) if as_tensors else x

    rows = []
    for s in dump:
        row: dict = {
            "sample_index": s.sample_id,
            "rollout_log_probs": val(s.rollout),
            "log_probs": val(s.trainer),
        }
        if s.mask is not None:
            row["loss_masks"] = s.mask
        rows.append(row)
    torch.save({"rollout_id": 7, "samples": rows}, path)
    return path


@pytest.fixture(scope="module")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store that already holds a run, so that 'left as it was' is a real check."""
    root = tmp_path_factory.mktemp("template") / "store"
    mismatchctl.ingest([FIXTURES / "sequence.parquet"], run="base", store=root)
    return root


def check(
    path: Path, template: Path, expected: dict | str, skip: bool, mapping: dict | None = None
) -> None:
    work = Path(tempfile.mkdtemp())
    try:
        store = work / "store"
        shutil.copytree(template, store)
        before = tree_digest(store)
        try:
            result = mismatchctl.ingest(
                [path], run="fuzz", store=store, skip_bad=skip, mapping=mapping or {}
            )
        except MismatchError as exc:
            assert isinstance(expected, str), f"unexpected error: {exc}"
            assert expected in exc.message, exc.message
            assert path.name in exc.message and exc.hint
            assert tree_digest(store) == before
            return
        assert isinstance(expected, dict), f"ingest succeeded, expected an error `{expected}`"
        tally = result.tally
        assert tally.sequences == expected["sequences"]
        assert tally.dropped_sequences == expected["dropped"]
        assert tally.model_tokens == expected["model_tokens"]
        assert tally.empty_sequences == expected["empty"]
        rows = mismatchctl.open_store(store).scan("fuzz").collect().sort(S.SEQ, S.POSITION)
        np.testing.assert_array_equal(rows[S.ROLLOUT].to_numpy(), expected["rollout"])
        np.testing.assert_array_equal(rows[S.TRAINER].to_numpy(), expected["trainer"])
    finally:
        shutil.rmtree(work)


@SETTINGS
@given(
    dump=samples(),
    dtype=st.sampled_from(["float64", "float64", "float32", "string"]),
    odd=st.booleans(),
    names=st.tuples(st.sampled_from(ODD_NAMES), st.sampled_from(ODD_NAMES)).filter(
        lambda t: t[0] != t[1]
    ),
    skip=st.booleans(),
)
def test_fuzz_parquet_sequence(
    dump: list[Sample], dtype: str, odd: bool, names: tuple[str, str], skip: bool,
    seeded_template: Path,
) -> None:  # fmt: skip
    cols = names if odd else ("rollout_log_probs", "old_log_probs")
    with tempfile.TemporaryDirectory() as tmp:
        path = write_parquet(dump, Path(tmp) / "dump.parquet", dtype, cols)
        mapping = {"rollout": cols[0], "trainer": cols[1]}
        check(path, seeded_template, oracle(dump, dtype, skip), skip, mapping)


@SETTINGS
@given(dump=samples(), skip=st.booleans())
def test_fuzz_nemo_jsonl(dump: list[Sample], skip: bool, seeded_template: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_jsonl(dump, Path(tmp) / "train_data_step2.jsonl")
        expected = oracle(dump, "float64", skip)
        if not dump:
            expected = "is empty"
        check(path, seeded_template, expected, skip)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(dump=samples(), skip=st.booleans(), tensors=st.booleans())
def test_fuzz_slime_pt(dump: list[Sample], skip: bool, tensors: bool, seeded_template: Path):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_pt(dump, Path(tmp) / "train_7.pt", tensors)
        check(path, seeded_template, oracle(dump, "float64", skip), skip)


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.text(max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(st.one_of(st.text(max_size=2), st.booleans(), st.lists(st.integers(), max_size=2)),
             min_size=1, max_size=3),
)  # fmt: skip


@SETTINGS
@given(
    key=st.sampled_from(["generation_logprobs", "prev_logprobs", "token_loss_mask", "token_ids"]),
    junk=JUNK,
)
def test_fuzz_nemo_wrong_types(key: str, junk: object, seeded_template: Path) -> None:
    """A value of the wrong type anywhere is an error naming the file, the line and the key."""
    bools = isinstance(junk, list) and all(isinstance(v, bool) for v in junk)
    assume(not (key == "token_loss_mask" and bools and len(junk) == 3))  # a valid true/false mask
    # NeMo-RL's own layout, an outer list of one around the values, may hold a valid line
    assume(not (isinstance(junk, list) and len(junk) == 1 and isinstance(junk[0], list)))
    good = {
        "generation_logprobs": [0.0, -0.5, -0.1],
        "prev_logprobs": [0.0, -0.4, -0.2],
        "token_loss_mask": [0, 1, 1],
        "token_ids": [5, 6, 7],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train_data_step1.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps({**good, key: junk}) + "\n")
        work = Path(tempfile.mkdtemp())
        try:
            store = work / "store"
            shutil.copytree(seeded_template, store)
            before = tree_digest(store)
            with pytest.raises(MismatchError) as info:
                mismatchctl.ingest([path], run="fuzz", store=store)
            assert "train_data_step1.jsonl" in info.value.message and info.value.hint
            assert "line 2" in info.value.message, info.value.message
            assert tree_digest(store) == before
        finally:
            shutil.rmtree(work)
