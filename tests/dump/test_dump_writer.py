"""``mismatchctl.dump.DumpWriter``: what it writes is what ``ingest`` reads, exactly.

The round trip draws batches (padded or ragged, float32 or float64, several steps, several
``add`` calls per step, empty and all-masked rows, garbage at masked positions), writes them,
ingests the directory into a fresh store and compares every model token, sequence and tag with
what was given. The rest: the file layout, atomic writes, naming, buffering, torch inputs, and a
clear error for every input the writer cannot represent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mismatchctl
from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.dump import DumpWriter
from mismatchctl.dump import layout as C
from mismatchctl.errors import InputError, UsageError
from mismatchctl.ingest.column_roles import SEQUENCE_NAMES, resolve
from mismatchctl.ingest.detect import expand_inputs

# ---------------------------------------------------------------------------------------------
# the round trip


@dataclass
class Row:
    """One response as given to ``add`` (before padded rows are cut)."""

    step: int
    sample_id: str
    rollout: np.ndarray
    trainer: np.ndarray
    mask: np.ndarray  # bool
    tokens: np.ndarray
    entropy: np.ndarray
    reward: float
    version: int
    kept: int = 0  # positions written (the whole row when ragged)


@dataclass
class Call:
    step: int
    padded: bool
    rows: list[Row] = field(default_factory=list)


def _row(rng: np.random.Generator, step: int, sid: str, length: int, dtype: type) -> Row:
    mask = rng.random(length) < rng.choice([0.0, 0.5, 0.9, 1.0])
    lr = -rng.exponential(rng.choice([0.05, 1.0, 6.0]), length)
    lt = lr + rng.normal(0.0, 0.05, length)
    lt = np.minimum(lt, 0.0)
    garbage = np.array([np.nan, np.inf, 5.0, -9999.0, 0.0])
    lr[~mask] = rng.choice(garbage, int((~mask).sum()))  # masked positions may hold anything
    return Row(
        step=step,
        sample_id=sid,
        rollout=lr.astype(dtype),
        trainer=lt.astype(dtype),
        mask=mask,
        tokens=rng.integers(0, 150_000, length),
        entropy=rng.exponential(1.0, length).astype(dtype),
        reward=float(rng.choice([0.0, 1.0, np.nan])),
        version=int(step - rng.integers(0, 3)),
    )


def _calls(seed: int) -> list[Call]:
    rng = np.random.default_rng(seed)
    calls = []
    for step in sorted(rng.choice(50, size=int(rng.integers(1, 4)), replace=False).tolist()):
        padded = bool(rng.integers(2))  # one layout per step: a step's calls agree on columns
        dtype = np.float32 if rng.integers(2) else np.float64
        for part in range(int(rng.integers(1, 3))):
            rows = [
                _row(rng, step, f"s{step}-{part}-{i}", int(rng.choice([0, 1, 3, 17, 64])), dtype)
                for i in range(int(rng.integers(1, 6)))
            ]
            calls.append(Call(step, padded, rows))
    return calls


def _pad(values: list[np.ndarray], width: int, fill: float | int) -> np.ndarray:
    out = np.full((len(values), width), fill, dtype=values[0].dtype)
    for i, v in enumerate(values):
        out[i, : len(v)] = v
    return out


def _add(writer: DumpWriter, call: Call) -> None:
    rows = call.rows
    get = {k: [getattr(r, k) for r in rows] for k in ("rollout", "trainer", "mask", "tokens")}
    get["entropy"] = [r.entropy for r in rows]
    if call.padded:
        width = max(len(r.mask) for r in rows) + 2  # extra padding past every row
        fills = {"rollout": 0.0, "trainer": np.nan, "mask": False, "tokens": 0, "entropy": 0.0}
        get = {k: _pad(v, width, fills[k]) for k, v in get.items()}
    writer.add(
        call.step,
        get["rollout"],
        get["trainer"],
        get["mask"],
        token_ids=get["tokens"],
        entropy=get["entropy"],
        sample_ids=[r.sample_id for r in rows],
        rewards=[r.reward for r in rows],
        weight_version=[r.version for r in rows],
    )
    for r in rows:  # padded rows are cut after their last model token
        last = np.flatnonzero(r.mask)
        r.kept = (int(last[-1]) + 1 if len(last) else 0) if call.padded else len(r.mask)


def _expected_tokens(rows: list[Row]) -> dict[tuple[str, int], tuple]:
    out = {}
    for r in rows:
        for pos in np.flatnonzero(r.mask):
            out[(r.sample_id, int(pos))] = (
                r.step,
                float(r.rollout[pos]),
                float(r.trainer[pos]),
                int(r.tokens[pos]),
            )
    return out


def _expected_counts(r: Row) -> tuple[int, int, int, int]:
    """(model, prompt, tool, pad) positions of the row as written."""
    where = np.flatnonzero(r.mask[: r.kept])
    if not len(where):
        return 0, 0, 0, r.kept
    prompt, pad = int(where[0]), r.kept - 1 - int(where[-1])
    return len(where), prompt, r.kept - len(where) - prompt - pad, pad


TAGS = {"gpu": "H20", "engine": "vllm-0.18.1", "tp": 2}


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_round_trip_is_exact(tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    root = tmp_path_factory.mktemp("rt")
    calls = _calls(seed)
    with DumpWriter(root / "dumps", tags=TAGS) as writer:
        for call in calls:
            _add(writer, call)
    rows = [r for c in calls for r in c.rows]
    assert [p.name for p in writer.written] == [
        f"step_{s:08d}.parquet" for s in sorted({c.step for c in calls})
    ]
    api.ingest([root / "dumps"], "rt", store=root / "store")
    store = mismatchctl.open_store(root / "store")
    tokens = store.scan("rt").collect()
    cols = (S.SAMPLE_ID, S.POSITION, S.STEP, S.ROLLOUT, S.TRAINER, S.TOKEN_ID)
    got = {
        (sid, pos): (step, lr, lt, tok)
        for sid, pos, step, lr, lt, tok in zip(*(tokens[c].to_list() for c in cols), strict=True)
    }
    assert got == _expected_tokens(rows)  # float64 of each float32 value: exactly equal
    seqs = store.scan("rt", kind="sequences").collect().sort(S.SAMPLE_ID)
    by_id = {r.sample_id: r for r in rows}
    assert seqs[S.SAMPLE_ID].to_list() == sorted(by_id)
    for rec in seqs.iter_rows(named=True):
        r = by_id[rec[S.SAMPLE_ID]]
        counts = (rec[S.MODEL_TOKENS], rec[S.PROMPT_TOKENS], rec[S.TOOL_TOKENS], rec[S.PAD_TOKENS])
        assert counts == _expected_counts(r)
        assert rec[S.STEP] == r.step
        assert rec[S.REWARD] == (None if np.isnan(r.reward) else r.reward)
        assert (rec[S.WEIGHT_VERSION], rec[S.WEIGHT_LAG]) == (r.version, r.step - r.version)
        model = r.entropy[: r.kept][r.mask[: r.kept]].astype(np.float64)
        if len(model):
            assert rec[S.ENTROPY] == pytest.approx(model.mean(), rel=1e-12)
        else:
            assert rec[S.ENTROPY] is None
    info = api.run_info("rt", store=root / "store")
    assert info.tags == {k: str(v) for k, v in TAGS.items()}
    assert info.steps == sorted({c.step for c in calls})
    assert info.sequences == len(rows)


def test_report_vllm_kl_matches_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rows, width = 24, 300
    mask = np.zeros((rows, width), dtype=np.int64)
    lengths = rng.integers(20, width, rows)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        mask[i, n // 3 : n // 3 + 10] = 0  # a tool response
    lr = (-rng.exponential(1.0, (rows, width))).astype(np.float32)
    lt = (lr + rng.normal(0, 0.03, (rows, width))).astype(np.float32)
    lt = np.minimum(lt, 0.0)
    with DumpWriter(tmp_path / "d") as w:
        w.add(1, lr[:12], lt[:12], mask[:12])
        w.add(2, lr[12:], lt[12:], mask[12:])
    api.ingest([tmp_path / "d"], "kl", store=tmp_path / "s")
    rep = api.report(["kl"], store=tmp_path / "s")
    keep = mask == 1
    r = lt[keep].astype(np.float64) - lr[keep].astype(np.float64)
    assert rep.whole().metrics["tokens"] == keep.sum()
    assert rep.whole().metrics["vllm_kl"] == pytest.approx(np.mean(np.exp(r) - 1 - r), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# the layout


def _batch(rows: int = 3, width: int = 6, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    lr = -rng.exponential(1.0, (rows, width)).astype(np.float32)
    lt = np.minimum(lr + rng.normal(0, 0.01, (rows, width)), 0).astype(np.float32)
    mask = (rng.random((rows, width)) < 0.7).astype(np.int64)
    mask[:, 0] = 1
    return lr, lt, mask


def test_columns_are_the_ones_ingest_reads(tmp_path: Path) -> None:
    lr, lt, mask = _batch()
    with DumpWriter(tmp_path) as w:
        w.add(
            5,
            lr,
            lt,
            mask,
            token_ids=np.arange(18).reshape(3, 6),
            entropy=np.abs(lr),
            sample_ids=["a", "b", "c"],
            rewards=[1.0, 0.0, 1.0],
            weight_version=4,
            gpu="H20",
            prompts=[[1, 2], [3], []],
            attrs={"data_source": "gsm8k", "dp_rank": [0, 1, 1]},
        )
    names = pq.read_schema(w.written[0]).names
    found = resolve(names, SEQUENCE_NAMES, {}, "dump")
    assert found == {
        S.ROLE_ROLLOUT: C.ROLLOUT,
        S.ROLE_TRAINER: C.TRAINER,
        S.ROLE_MASK: C.MASK,
        S.ROLE_TOKENS: C.TOKENS,
        S.ROLE_STEP: C.STEP,
        S.ROLE_SAMPLE_ID: C.SAMPLE_ID,
        S.ROLE_GPU: C.GPU,
        S.ROLE_REWARD: C.REWARD,
        S.ROLE_ENTROPY: C.ENTROPY,
        S.ROLE_WEIGHT_VERSION: C.WEIGHT_VERSION,
    }
    assert set(names) - set(found.values()) == {
        C.PROMPT_LENGTH,
        C.PROMPTS,
        "data_source",
        "dp_rank",
    }
    table = pq.read_table(w.written[0])
    assert table[C.PROMPT_LENGTH].to_pylist() == [2, 1, 0]
    assert table[C.PROMPTS].to_pylist() == [[1, 2], [3], []]
    assert table["dp_rank"].to_pylist() == [0, 1, 1]
    assert table[C.WEIGHT_VERSION].to_pylist() == [4, 4, 4]


def test_values_keep_their_float_width(tmp_path: Path) -> None:
    lr, lt, mask = _batch()
    with DumpWriter(tmp_path) as w:
        w.add(0, lr, lt.astype(np.float64), mask)
    schema = pq.read_schema(w.written[0])
    assert schema.field(C.ROLLOUT).type == pa.list_(pa.float32())
    assert schema.field(C.TRAINER).type == pa.list_(pa.float64())
    assert schema.field(C.MASK).type == pa.list_(pa.bool_())


def test_padded_rows_are_cut_after_the_last_model_token_or_at_lengths(tmp_path: Path) -> None:
    lr = -np.ones((2, 5), dtype=np.float32)
    mask = np.array([[0, 1, 0, 1, 0], [0, 0, 0, 0, 0]])
    with DumpWriter(tmp_path / "a") as w:
        w.add(0, lr, lr, mask)
    assert pq.read_table(w.written[0])[C.MASK].to_pylist() == [[False, True, False, True], []]
    with DumpWriter(tmp_path / "b") as w:
        w.add(0, lr, lr, mask, lengths=[5, 2])
    assert [len(m) for m in pq.read_table(w.written[0])[C.MASK].to_pylist()] == [5, 2]
    api.ingest([tmp_path / "b"], "b", store=tmp_path / "s")
    seqs = mismatchctl.open_store(tmp_path / "s").scan("b", kind="sequences").collect()
    assert sorted(seqs[S.PAD_TOKENS].to_list()) == [1, 2]


def test_metadata_has_tags_step_and_layout_but_only_tags_become_tags(tmp_path: Path) -> None:
    lr, lt, mask = _batch()
    with DumpWriter(tmp_path / "d", tags={"gpu": "L20", "temperature": 0.7}) as w:
        w.add(12, lr, lt, mask)
    meta = pq.read_schema(w.written[0]).metadata
    assert meta == {
        b"gpu": b"L20",
        b"temperature": b"0.7",
        b"step": b"12",
        C.LAYOUT_KEY.encode(): C.LAYOUT_VERSION.encode(),
    }
    api.ingest([tmp_path / "d"], "m", store=tmp_path / "s")
    info = api.run_info("m", store=tmp_path / "s")
    assert info.tags == {"gpu": "L20", "temperature": "0.7"}
    assert info.gpus == ["L20"]


def test_a_nan_logprob_is_written_and_ingest_names_the_sample(tmp_path: Path) -> None:
    """The writer keeps what the trainer had (a NaN is evidence); ingest refuses it, or drops and
    counts it with skip_bad: it is never read as a number."""
    lr, lt, mask = _batch()
    lr[1, 0] = np.nan
    with DumpWriter(tmp_path / "d") as w:
        w.add(0, lr, lt, mask, sample_ids=["a", "b", "c"])
    assert np.isnan(pq.read_table(w.written[0])[C.ROLLOUT].to_pylist()[1][0])
    with pytest.raises(InputError, match="sample `b`"):
        api.ingest([tmp_path / "d"], "n", store=tmp_path / "s")
    result = api.ingest([tmp_path / "d"], "n", store=tmp_path / "s", skip_bad=True)
    assert result.tally.dropped_sequences == 1 and result.tally.sequences == 2


# ---------------------------------------------------------------------------------------------
# files: buffering, naming, atomic writes


def test_calls_of_one_step_share_a_file_written_when_the_step_changes(tmp_path: Path) -> None:
    lr, lt, mask = _batch(4)
    w = DumpWriter(tmp_path)
    w.add(1, lr[:2], lt[:2], mask[:2], sample_ids=["a", "b"])
    w.add(1, lr[2:], lt[2:], mask[2:], sample_ids=["c", "d"])
    assert w.written == [] and list(tmp_path.iterdir()) == []
    w.add(2, lr, lt, mask)
    assert [p.name for p in w.written] == ["step_00000001.parquet"]
    assert pq.read_table(w.written[0])[C.SAMPLE_ID].to_pylist() == ["a", "b", "c", "d"]
    assert w.flush() == tmp_path / "step_00000002.parquet"
    assert w.flush() is None
    w.close()
    w.close()
    with pytest.raises(UsageError, match="closed DumpWriter"):
        w.add(3, lr, lt, mask)


def test_a_with_block_that_raises_still_writes_what_was_added(tmp_path: Path) -> None:
    lr, lt, mask = _batch()
    with pytest.raises(RuntimeError), DumpWriter(tmp_path) as w:
        w.add(7, lr, lt, mask)
        raise RuntimeError("the trainer crashed")
    assert [p.name for p in w.written] == ["step_00000007.parquet"]


def test_a_step_written_again_gets_the_next_part_and_nothing_is_overwritten(
    tmp_path: Path,
) -> None:
    lr, lt, mask = _batch()
    with DumpWriter(tmp_path) as w:
        w.add(3, lr, lt, mask)
        w.flush()
        w.add(3, lr[:1], lt[:1], mask[:1])
    first = (tmp_path / "step_00000003.parquet").read_bytes()
    with DumpWriter(tmp_path) as again:  # a restarted trainer, same directory
        again.add(3, lr[:2], lt[:2], mask[:2])
    names = [p.name for p in w.written + again.written]
    assert names == [
        "step_00000003.parquet",
        "step_00000003.part_1.parquet",
        "step_00000003.part_2.parquet",
    ]
    assert (tmp_path / "step_00000003.parquet").read_bytes() == first
    assert [pq.read_metadata(tmp_path / n).num_rows for n in names] == [3, 1, 2]


def test_ranks_write_their_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lr, lt, mask = _batch()
    monkeypatch.delenv("RANK", raising=False)
    assert DumpWriter(tmp_path).rank is None
    with DumpWriter(tmp_path, rank=3) as w3:
        w3.add(1, lr, lt, mask)
    monkeypatch.setenv("RANK", "5")
    with DumpWriter(tmp_path) as w5:
        w5.add(1, lr, lt, mask)
    assert [p.name for p in w3.written + w5.written] == [
        "step_00000001.rank_3.parquet",
        "step_00000001.rank_5.parquet",
    ]
    api.ingest([tmp_path], "ranks", store=tmp_path.parent / "store")
    assert api.run_info("ranks", store=tmp_path.parent / "store").steps == [1]


def test_the_file_appears_whole_by_rename_after_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lr, lt, mask = _batch()
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        src, dst = Path(src), Path(dst)
        assert not dst.exists()
        assert src.parent == dst.parent and src.name == f".{dst.name}.tmp"
        assert pq.read_metadata(src).num_rows == 3  # complete before it gets its name
        with pytest.raises(InputError, match="holds no dump files"):
            expand_inputs([str(tmp_path)])  # ingest never picks up the temp file
        events.append(("replace", src.name))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    with DumpWriter(tmp_path) as w:
        w.add(1, lr, lt, mask)
    tmp = str(tmp_path / ".step_00000001.parquet.tmp")
    assert events == [
        ("fsync", tmp),
        ("replace", ".step_00000001.parquet.tmp"),
        ("fsync", str(tmp_path)),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001.parquet"]


def test_a_failed_write_leaves_no_file_and_keeps_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lr, lt, mask = _batch()
    w = DumpWriter(tmp_path)
    w.add(1, lr, lt, mask)
    real = pq.write_table

    def disk_full(table: pa.Table, where: Path, **kw: object) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    with pytest.raises(OSError, match="No space left"):
        w.flush()
    assert list(tmp_path.iterdir()) == [] and w.written == []
    monkeypatch.setattr(pq, "write_table", real)
    assert w.flush() == tmp_path / "step_00000001.parquet"
    assert pq.read_metadata(w.written[0]).num_rows == 3


def test_inputs_can_change_after_add(tmp_path: Path) -> None:
    lr, lt, mask = _batch()
    keep = lr.copy()
    rewards = np.array([1.0, 2.0, 3.0])
    ragged = [row.copy() for row in lr]
    with DumpWriter(tmp_path) as w:
        w.add(1, lr, lt, mask, rewards=rewards)
        w.add(1, ragged[:1], [lt[0]], [mask[0]], rewards=rewards[:1])
        lr[:] = 0.0
        rewards[:] = 0.0
        ragged[0][:] = 0.0
    table = pq.read_table(w.written[0])
    kept_rows = [keep[i][: len(m)] for i, m in enumerate(table[C.MASK].to_pylist()[:3])]
    for got, want in zip(table[C.ROLLOUT].to_pylist()[:3], kept_rows, strict=True):
        assert np.array_equal(np.array(got, np.float32), want)
    assert table[C.ROLLOUT].to_pylist()[3] == keep[0].tolist()
    assert table[C.REWARD].to_pylist() == [1.0, 2.0, 3.0, 1.0]


def test_a_batch_without_rows_writes_nothing(tmp_path: Path) -> None:
    empty = np.zeros((0, 8), dtype=np.float32)
    with DumpWriter(tmp_path) as w:
        assert w.add(1, empty, empty, empty.astype(bool)) == 0
        assert w.add(1, [], [], []) == 0
    assert w.written == []


# ---------------------------------------------------------------------------------------------
# torch, and importing without the command-line stack


def test_torch_tensors_bf16_and_on_autograd(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    lr = -torch.rand((3, 7), generator=gen).to(torch.bfloat16)
    lt = (-torch.rand((3, 7), generator=gen)).requires_grad_()
    mask = torch.rand((3, 7), generator=gen) < 0.8
    mask[:, 0] = True
    tokens = torch.randint(0, 50_000, (3, 7), generator=gen)
    with DumpWriter(tmp_path / "d") as w:
        w.add(torch.tensor(4), lr, lt * 1.0, mask, token_ids=tokens, rewards=torch.ones(3))
        w.add(4, list(lr), list(lt.detach()), list(mask), token_ids=list(tokens), rewards=[0] * 3)
    table = pq.read_table(w.written[0])
    assert table.schema.field(C.ROLLOUT).type == pa.list_(pa.float32())
    flat = np.concatenate([np.array(r, np.float32) for r in table[C.ROLLOUT].to_pylist()])
    cut = [len(m) for m in table[C.MASK].to_pylist()]
    want = np.concatenate([lr.float().numpy()[i % 3, :n] for i, n in enumerate(cut)])
    assert np.array_equal(flat, want)  # bf16 -> float32 is exact
    api.ingest([tmp_path / "d"], "t", store=tmp_path / "s")
    tok = mismatchctl.open_store(tmp_path / "s").scan("t").collect()
    model = mask.numpy()
    assert sorted(tok[S.ROLLOUT].to_list()) == sorted(
        np.tile(lr.float().numpy()[model].astype(np.float64), 2).tolist()
    )
    assert sorted(tok[S.TOKEN_ID].to_list()) == sorted(np.tile(tokens.numpy()[model], 2).tolist())


def test_importing_the_writer_loads_no_command_line_or_plotting_stack() -> None:
    code = (
        "import sys; import mismatchctl.dump; from mismatchctl import DumpWriter; "
        "heavy = {'typer', 'rich', 'plotly', 'numba', 'polars', 'torch', 'ray'}; "
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---------------------------------------------------------------------------------------------
# inputs the writer cannot represent: an error naming the argument, the row, what was expected


LR, LT, MASK = _batch()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"trainer_logprobs": LT[:, :5]},
            r"trainer_logprobs: shape \(3, 5\), expected the mask's \(3, 6\)",
        ),
        ({"rollout_logprobs": list(LR)}, r"rollout_logprobs: the mask is a padded 2-D array"),
        (
            {"rollout_logprobs": LR.astype(np.int64)},
            r"rollout_logprobs: expected floating point values, found dtype int64",
        ),
        ({"mask": np.where(MASK == 1, 2, 0)}, r"mask: value 2 at \(0, 0\)"),
        ({"mask": np.array([1, 0, 1])}, r"mask: a 1-D array"),
        ({"token_ids": LR}, r"token_ids: expected integer token ids, found dtype float32"),
        ({"sample_ids": "x"}, r"sample_ids: a single value 'x', expected one id per response"),
        ({"sample_ids": ["a", "b"]}, r"sample_ids: 2 values, expected one per response \(3\)"),
        ({"sample_ids": ["a", "b\x1b[2J", "c"]}, r"sample_ids: row 1 is b\\x1b\[2J holds control"),
        ({"sample_ids": ["a", "", "c"]}, r"sample_ids: row 1 is empty"),
        ({"rewards": [1.0, 2.0]}, r"rewards: shape \(2,\), dtype float64, expected \(3,\)"),
        ({"weight_version": 1.5}, r"weight_version: row 0 is float 1.5"),
        ({"gpu": ["H20", 3, "H20"]}, r"gpu: row 1 is int"),
        ({"lengths": [6, 7, 1]}, r"lengths: row 1 is 7 \(expected 0 to the row width, 6\)"),
        (
            {"prompt_lengths": [2, 2, 2], "prompts": [[1, 2], [3], [4, 5]]},
            r"prompt_lengths: row 1 is 2, but its prompt has 1",
        ),
        ({"prompt_lengths": [1, -1, 0]}, r"prompt_lengths: row 1 is -1"),
        (
            {"attrs": {"uid": ["a", "b", "c"]}},
            r"attrs: `uid` is a column name ingest reads as a role",
        ),
        ({"attrs": {"prompt_length": 3}}, r"attrs: `prompt_length` is a column name"),
        ({"attrs": {"bad name": 1}}, r"attrs: name 'bad name' is not a simple column name"),
        ({"attrs": {"src": ["a", 1, "b"]}}, r"attrs\['src'\]: values of types int, str"),
        ({"attrs": {"src": [None, None, None]}}, r"attrs\['src'\]: every value is None"),
        ({"step": -1}, r"step -1 \(expected a non-negative integer\)"),
    ],
)
def test_bad_inputs_are_refused_with_a_clear_error(
    tmp_path: Path, kwargs: dict, message: str
) -> None:
    args = {"step": 1, "rollout_logprobs": LR, "trainer_logprobs": LT, "mask": MASK} | kwargs
    w = DumpWriter(tmp_path)
    with pytest.raises(UsageError, match=message) as err:
        w.add(**args)
    assert err.value.hint
    w.close()
    assert list(tmp_path.iterdir()) == []


def test_ragged_rows_must_match_the_mask_row_by_row(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    with pytest.raises(
        UsageError, match="trainer_logprobs: row 1 has 2 values, the mask's row has 3"
    ):
        w.add(0, [[-1.0], [-1.0, -2.0, -3.0]], [[-1.0], [-1.0, -2.0]], [[1], [1, 1, 0]])
    with pytest.raises(UsageError, match="rollout_logprobs: 1 rows, expected the mask's 2"):
        w.add(0, [[-1.0]], [[-1.0], [-1.0]], [[1], [1]])


def test_calls_of_one_step_must_give_the_same_columns(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    w.add(1, LR, LT, MASK, rewards=[1.0, 0.0, 1.0])
    with pytest.raises(
        UsageError, match=r"step 1: add\(\) gives other columns .*\(it lacks reward\)"
    ):
        w.add(1, LR, LT, MASK)
    w.flush()
    w.add(1, LR, LT, MASK)  # after a flush, another part of the step
    w.close()
    assert [p.name for p in w.written] == ["step_00000001.parquet", "step_00000001.part_1.parquet"]


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"step": "3"}, "key `step` is reserved"),
        ({"gpu ": "H20"}, "is not a simple key"),
        ({"gpu": " H20"}, "empty or padded with spaces"),
        ({"gpu": ""}, "empty or padded with spaces"),
        ({"gpu": "x" * 257}, "value of 257 characters"),
        ({"gpu": "H20\x1b[31m"}, "is not a simple key with printable text"),
        ({"gpu": ["H20"]}, "has a list value"),
    ],
)
def test_tags_ingest_would_not_read_back_are_refused(
    tmp_path: Path, tags: dict, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        DumpWriter(tmp_path, tags=tags)
