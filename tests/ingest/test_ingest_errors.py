"""Every bad input: exit code 1, the exact message with a hint, and the store byte-for-byte unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from tests.helpers import FIXTURES, cli, tree_digest

GOOD = FIXTURES / "sequence.parquet"


def _seq_file(path: Path, roll: list, train: list, mask: list | None = None, **extra) -> Path:
    cols = {
        "uid": [f"s{i}" for i in range(len(roll))],
        "rollout_log_probs": pa.array(roll, pa.list_(pa.float64())),
        "old_log_probs": pa.array(train, pa.list_(pa.float64())),
        **extra,
    }
    if mask is not None:
        cols["response_mask"] = pa.array(mask, pa.list_(pa.int8()))
    pq.write_table(pa.table(cols), path)
    return path


@pytest.fixture
def seeded(store: Path) -> Path:
    """A store that already holds one run, so that 'unchanged' is a real check."""
    assert cli("ingest", str(GOOD), "--run", "base", "-q").code == 0
    return store


def _fails(store: Path, *args: str) -> str:
    before = tree_digest(store)
    ran = cli("ingest", *args, "--run", "new", "-q")
    assert ran.code == 1, ran.err
    assert tree_digest(store) == before
    assert ran.out == ""
    return ran.err


def test_corrupt_parquet(seeded: Path, tmp_path: Path) -> None:
    bad = tmp_path / "dump.parquet"
    bad.write_bytes(b"PAR1 this is not really parquet")
    err = _fails(seeded, str(bad))
    assert err.startswith(f"Error: cannot read {bad} as Parquet: ")
    assert err.endswith(
        "\n\nHint: the file is truncated or corrupt; re-export it, or leave it out of the inputs.\n"
    )


def test_truncated_parquet_among_good_files(seeded: Path, tmp_path: Path) -> None:
    """The good file before the bad one is not committed either."""
    data = GOOD.read_bytes()
    cut = tmp_path / "step_9.parquet"
    cut.write_bytes(data[: len(data) // 2])
    other = tmp_path / "a_good.parquet"
    other.write_bytes(data)
    err = _fails(seeded, str(other), str(cut))
    assert err.startswith(f"Error: cannot read {cut} as Parquet: ")


def test_unknown_format(seeded: Path, tmp_path: Path) -> None:
    bad = tmp_path / "dump.csv"
    bad.write_text("a,b\n1,2\n")
    assert _fails(seeded, str(bad)) == (
        f"Error: cannot tell the format of {bad} (suffix `.csv`)\n\n"
        "Hint: pass --format (one of parquet-sequence, parquet-token, slime-pt, nemo-jsonl, "
        "verl-dataproto, prime-jsonl).\n"
    )


def test_missing_trainer_column(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"step": [1], "rollout_log_probs": [[-0.1]], "foo": [[-0.2]]}), path)
    assert _fails(seeded, str(path)) == (
        f"Error: no trainer logprob column in {path} (found: step, rollout_log_probs, foo)\n\n"
        "Hint: name it with --map trainer=<column>.\n"
    )


def test_missing_rollout_column(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"step": [1], "old_log_probs": [[-0.1]]}), path)
    assert _fails(seeded, str(path)) == (
        f"Error: no rollout logprob column in {path} (found: step, old_log_probs)\n\n"
        "Hint: name it with --map rollout=<column> (and the trainer side with "
        "--map trainer=<column>).\n"
    )


def test_length_mismatch_names_the_sample(seeded: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet", [[-0.1, -0.2], [-0.1, -0.2, -0.3]], [[-0.1, -0.2], [-0.1, -0.2]]
    )
    assert _fails(seeded, str(path)) == (
        f"Error: {path}: sample `s1` (row 1): rollout has 3 values, trainer has 2; "
        "1 bad sample(s) in this batch\n\n"
        "Hint: fix the dump, or pass --skip-bad to drop bad samples (they are counted and "
        "listed).\n"
    )


def test_mask_length_mismatch(seeded: Path, tmp_path: Path) -> None:
    path = _seq_file(tmp_path / "x.parquet", [[-0.1, -0.2]], [[-0.1, -0.2]], mask=[[1, 1, 0]])
    err = _fails(seeded, str(path))
    assert err.startswith(f"Error: {path}: sample `s0` (row 0): rollout has 2 values, mask has 3; ")


def test_non_finite_logprob(seeded: Path, tmp_path: Path) -> None:
    path = _seq_file(tmp_path / "x.parquet", [[-0.1, float("nan")]], [[-0.1, -0.2]])
    err = _fails(seeded, str(path))
    assert err.startswith(
        f"Error: {path}: sample `s0` (row 0): rollout logprob nan at position 1 of a model "
        "token (expected a finite value <= 0.0001); 1 bad sample(s) in this batch\n"
    )


def test_positive_logprob(seeded: Path, tmp_path: Path) -> None:
    path = _seq_file(tmp_path / "x.parquet", [[-0.1, -0.2]], [[0.5, -0.2]])
    err = _fails(seeded, str(path))
    assert err.startswith(
        f"Error: {path}: sample `s0` (row 0): trainer logprob 0.5 at position 0 of a model "
        "token (expected a finite value <= 0.0001)"
    )


def test_sentinels_at_masked_positions_are_fine(store: Path, tmp_path: Path) -> None:
    """SkyRL writes -9999 at masked positions: only model tokens are checked."""
    path = _seq_file(
        tmp_path / "x.parquet", [[-0.1, -9999.0]], [[-0.1, float("-inf")]], mask=[[1, 0]]
    )
    assert cli("ingest", str(path), "--run", "ok", "-q").code == 0


def test_empty_inputs(seeded: Path, tmp_path: Path) -> None:
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    assert _fails(seeded, str(empty_dir)).startswith(
        f"Error: directory {empty_dir} holds no dump files"
    )
    assert _fails(seeded, str(tmp_path / "missing.parquet")) == (
        f"Error: no such file or directory: {tmp_path / 'missing.parquet'}\n\n"
        "Hint: check the path.\n"
    )
    no_rows = tmp_path / "empty.parquet"
    pq.write_table(pq.read_table(GOOD).slice(0, 0), no_rows)
    assert _fails(seeded, str(no_rows)) == (
        f"Error: {no_rows} holds no samples\n\nHint: leave empty dumps out of the inputs.\n"
    )


def test_bad_json_line(seeded: Path, tmp_path: Path) -> None:
    path = tmp_path / "train_data_step2.jsonl"
    good = (FIXTURES / "train_data_step3.jsonl").read_text().splitlines()[0]
    path.write_text(good + "\n{not json\n")
    err = _fails(seeded, str(path))
    assert err.startswith(f"Error: {path}: line 2 is not valid JSON")


def test_unsafe_pickle_is_refused(seeded: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "train_0.pt"
    torch.save({"rollout_id": 0, "samples": [{"x": Path("evil")}]}, path)
    err = _fails(seeded, str(path))
    assert err.startswith(
        f"Error: {path} needs full unpickling to load (it refers to `pathlib.PosixPath`"
    )
    assert "so that no code from a dump runs" in err and "pass --trust-pickle" in err


def test_missing_torch_gives_install_hint(seeded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    err = _fails(seeded, str(FIXTURES / "slime_train_3.pt"))
    assert err == (
        f"Error: reading {FIXTURES / 'slime_train_3.pt'} (a torch .pt file) needs torch, which is "
        "not installed\n\n"
        "Hint: pip install 'mismatchctl[torch]'\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--format", "csv"],
            "Error: unknown format `csv` (known: parquet-sequence, "
            "parquet-token, slime-pt, nemo-jsonl, verl-dataproto, prime-jsonl)",
        ),
        (["--tag", "gpu"], "Error: --tag `gpu` is not KEY=VALUE"),
        (["--map", "logits=x"], "Error: --map `logits=x`: unknown role `logits`"),
        (
            ["--map", "rollout=nope"],
            f"Error: column `nope` (from --map rollout=nope) not found in {GOOD}",
        ),
    ],
)
def test_bad_options(seeded: Path, args: list[str], message: str) -> None:
    assert _fails(seeded, str(GOOD), *args).startswith(message)


def test_bad_run_name(seeded: Path) -> None:
    before = tree_digest(seeded)
    ran = cli("ingest", str(GOOD), "--run", "a=b", "-q")
    assert ran.code == 1
    assert ran.err.startswith("Error: run name `a=b` is not allowed")
    assert tree_digest(seeded) == before


def test_failed_first_ingest_creates_no_store(store: Path, tmp_path: Path) -> None:
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"garbage")
    assert cli("ingest", str(bad), "--run", "r", "-q").code == 1
    assert not store.exists()


def test_skip_bad_drops_and_reports(store: Path, tmp_path: Path) -> None:
    path = _seq_file(
        tmp_path / "x.parquet",
        [[-0.1, -0.2], [-0.1, 0.3], [-0.3], [-0.1, float("inf")]],
        [[-0.1, -0.2], [-0.1, -0.2], [-0.3, -0.1], [-0.1, -0.2]],
    )
    ran = cli("ingest", str(path), "--run", "r", "--skip-bad", "--json")
    assert ran.code == 0, ran.err
    totals = json.loads(ran.out)["totals"]
    assert totals["sequences"] == 1 and totals["model_tokens"] == 2
    assert totals["dropped"] == {
        "trainer length differs from rollout": 1,
        "rollout logprob > 0.0001": 1,
        "rollout logprob not finite": 1,
    }
    assert [d.split(":")[0] for d in totals["dropped_ids"]] == ["s2", "s1", "s3"]
    shown = cli("runs", "show", "r")
    assert "dropped rollout logprob not finite: 1" in shown.out
    assert np.isfinite(1.0)


def test_null_sample_ids(store: Path, tmp_path: Path) -> None:
    """Sequence layout: a null id is named `<file>#<row>` (never an empty id that would merge
    samples); token layout: a null id cannot say which sequence a token is in, an error."""
    seq = tmp_path / "seq.parquet"
    pq.write_table(
        pa.table(
            {
                "uid": pa.array(["a", None, "c"]),
                "rollout_log_probs": [[-0.1, -0.2], [-0.3], [-0.5, -0.6]],
                "old_log_probs": [[-0.1, -0.25], [-0.3], [-0.5, -0.7]],
            }
        ),
        seq,
    )
    assert cli("ingest", str(seq), "--run", "s", "-q").code == 0
    ids = mismatchctl.open_store(store).scan("s", kind="sequences").collect()["sample_id"]
    assert ids.to_list() == ["a", "seq#1", "c"]
    tok = tmp_path / "tok.parquet"
    pq.write_table(
        pa.table(
            {
                "step": [0, 0, 0],
                "sample_id": pa.array(["a", None, "a"]),
                "rollout_logprob": [-0.1, -0.2, -0.3],
                "trainer_logprob": [-0.1, -0.2, -0.3],
            }
        ),
        tok,
    )
    before = tree_digest(store)
    ran = cli("ingest", str(tok), "--run", "t")
    assert ran.code == 1
    assert f"{tok}: column `sample_id`: 1 row(s) have no sample id (first: row 1)" in ran.err
    assert "Hint:" in ran.err and tree_digest(store) == before


def test_files_are_named_by_the_path_as_given(
    seeded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two step_3/data.parquet under one directory input are told apart: the directory as given
    (relative to the working directory) joined with the file's path inside it."""
    for run in ("a", "b"):
        (tmp_path / "dumps" / run / "step_3").mkdir(parents=True)
    pq.write_table(pq.read_table(GOOD), tmp_path / "dumps" / "a" / "step_3" / "data.parquet")
    _seq_file(
        tmp_path / "dumps" / "b" / "step_3" / "data.parquet", [[-0.1, float("nan")]], [[-0.1, -0.2]]
    )
    monkeypatch.chdir(tmp_path)
    err = _fails(seeded, "dumps")
    assert err.startswith(
        "Error: dumps/b/step_3/data.parquet: sample `s0` (row 0): rollout logprob nan"
    )
    err = _fails(seeded, "./dumps/b/step_3/data.parquet")
    assert err.startswith("Error: dumps/b/step_3/data.parquet: sample `s0` (row 0)")


def test_slime_rollout_dump_is_named_as_such(seeded: Path) -> None:
    pytest.importorskip("torch")
    path = FIXTURES / "slime_rollout_3.pt"
    assert _fails(seeded, str(path)) == (
        f"Error: {path} is a slime rollout dump (--save-debug-rollout-data: one Sample per "
        "response, with `response_length` and `status`): it holds the inference engine's logprobs "
        "only, no trainer logprobs (`log_probs`) to compare them with\n\n"
        "Hint: ingest slime's train dump instead, written with --save-debug-train-data PATH (or "
        "--dump-details DIR, into DIR/train_data/): its samples hold both `rollout_log_probs` and "
        "the trainer's `log_probs`.\n"
    )


def _nemo_line(**changes: object) -> str:
    good = (FIXTURES / "train_data_step3.jsonl").read_text().splitlines()[0]
    return json.dumps({**json.loads(good), **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"prev_logprobs": [[0.0] * 16, [0.0] * 16]},
            "line 1: `prev_logprobs`: expected one sample's values (NeMo-RL writes them in an "
            "outer list of one), found 2 lists",
        ),
        ({"input_lengths": [17]}, "line 1: `input_lengths`: 17 is more than the 16 values of "),
        (
            {"input_lengths": [5]},
            "line 1: `input_lengths`: the sequence is 5 long, but `token_loss_mask` marks a model "
            "token at position 5, in the padding past it",
        ),
    ],
)
def test_nemo_line_shape_errors(seeded: Path, tmp_path: Path, changes: dict, message: str) -> None:
    path = tmp_path / "train_data_step3.jsonl"
    path.write_text(_nemo_line(**changes) + "\n")
    assert _fails(seeded, str(path)).startswith(f"Error: {path}: {message}")


def test_token_layout_refuses_a_shared_sample_id(seeded: Path, tmp_path: Path) -> None:
    """verl's uid is one per prompt group: two responses with one id would interleave."""
    path = tmp_path / "tokens.parquet"
    pq.write_table(
        pa.table(
            {
                "step": [1] * 5,
                "uid": ["g0", "g0", "g0", "g0", "g1"],
                "position": [0, 1, 0, 1, 0],
                "rollout_logprob": [-0.1, -0.2, -0.3, -0.4, -0.5],
                "trainer_logprob": [-0.1, -0.2, -0.3, -0.4, -0.5],
            }
        ),
        path,
    )
    assert _fails(seeded, str(path)) == (
        f"Error: {path}: sample `g0` of step 1 has position 0 twice (column `position`): the "
        "sample id `uid` is shared by several sequences (verl's `uid` is one per prompt group), "
        "and their tokens would be merged into one\n\n"
        "Hint: name a column that is unique per response with --map sample_id=<column> (e.g. "
        "the row index of the response in its batch).\n"
    )


def test_staged_ingest_names_the_path_as_given(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks (Ray, or threads for object storage) read an absolute path, but name the input as
    the user gave it."""
    from mismatchctl.errors import InputError
    from mismatchctl.ingest import staged
    from mismatchctl.ingest.run_ingest import Options

    (tmp_path / "step_2").mkdir()
    _seq_file(tmp_path / "step_2" / "data.parquet", [[-0.1, 0.5]], [[-0.1, -0.2]])
    monkeypatch.chdir(tmp_path)
    opts = Options(run="r", tags={}, fmt=None, mapping={}, skip_bad=False)
    with pytest.raises(InputError) as info:
        staged.ingest_staged(
            mismatchctl.open_store(store), ["step_2"], opts, staged.thread_tasks(1)
        )
    assert info.value.message.startswith("step_2/data.parquet: sample `s0` (row 0): rollout")
