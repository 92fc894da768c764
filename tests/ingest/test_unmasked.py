"""Dumps without a response mask: right padding is refused (or kept with --allow-padding, counted
and said), and verl's attention_mask is used by its response part, refused when what it keeps
still holds tool responses. Numbers are checked against numpy on the files' own arrays."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import schema as S
from mismatchctl.errors import InputError
from tests.helpers import FIXTURES, cli, tree_digest

VERL = FIXTURES / "verl_step_5.parquet"
VERL_TOOLS = FIXTURES / "verl_tools_step_5.parquet"


def _vllm_kl(roll: np.ndarray, train: np.ndarray) -> float:
    """Token-mean K3 of the rollout side against the trainer side (docs/metrics.md)."""
    r = train - roll
    return float(np.mean(np.expm1(r) - r))


def _padded_file(path: Path, seed: int = 0) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray]:
    """A right-padded batch as verl writes it (0.0 on both sides past each response), written
    without its mask; returns the padded arrays and the mask that was left out."""
    rng = np.random.default_rng(seed)
    lengths = [40, 12, 25, 33, 9, 40]
    width = max(lengths)
    roll = np.zeros((len(lengths), width), np.float32)
    train = np.zeros_like(roll)
    mask = np.zeros((len(lengths), width), np.int8)
    for i, n in enumerate(lengths):
        lp = -rng.exponential(1.0, n).astype(np.float32)
        roll[i, :n] = lp
        train[i, :n] = lp + rng.normal(0, 0.05, n).astype(np.float32).clip(max=-lp)
        mask[i, :n] = 1
    table = pa.table(
        {
            "uid": [f"u{i // 2}" for i in range(len(lengths))],
            "rollout_log_probs": pa.array(list(roll), pa.list_(pa.float32())),
            "old_log_probs": pa.array(list(train), pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, path)
    return path, roll.astype(np.float64), train.astype(np.float64), mask


def test_right_padding_without_mask_is_refused(store: Path, tmp_path: Path) -> None:
    path, *_ = _padded_file(tmp_path / "step_3.parquet")
    before = tree_digest(store)
    ran = cli("ingest", str(path), "--run", "p", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {path}: no mask, and 3 of the 6 samples of this batch end in padding: 8 or more "
        "positions at exact 0.0 on both sides; the longest, 31 positions, ends sample `u2` (row "
        "4). Stored as model tokens, padding dilutes every metric\n\n"
        "Hint: name the response mask with --map mask=<column> (1 = model token), or pass "
        "--allow-padding to keep these positions as model tokens (they are counted and "
        "reported).\n"
    )
    assert tree_digest(store) == before


def test_allow_padding_keeps_counts_and_says_so(store: Path, tmp_path: Path) -> None:
    path, roll, train, mask = _padded_file(tmp_path / "step_3.parquet")
    ran = cli("ingest", str(path), "--run", "p", "-q", "--allow-padding", "--json")
    assert ran.code == 0, ran.err
    totals = json.loads(ran.out)["totals"]
    runs = (mask == 0).sum(axis=1)  # the padding of each row (the mask is 1s, then 0s)
    assert totals["model_tokens"] == mask.size  # every position kept, as the flag says
    assert totals["padding_kept"] == int(runs[runs >= 8].sum()) == 28 + 15 + 31
    note = json.loads(cli("runs", "show", "p", "--json").out)["sources"][0]["notes"][-1]
    assert (
        note
        == "74 trailing positions that look like padding kept as model tokens (--allow-padding)"
    )
    report = mismatchctl.report("p", store=store).whole()
    assert report is not None
    # what the padded file gives (padding diluting the mean), and what the mask would have given
    assert report.metrics["vllm_kl"] == pytest.approx(
        _vllm_kl(roll.ravel(), train.ravel()), rel=1e-9
    )
    real = _vllm_kl(roll[mask == 1], train[mask == 1])
    assert report.metrics["vllm_kl"] == pytest.approx(real * mask.sum() / mask.size, rel=1e-9)


def test_short_trailing_zero_runs_are_real_tokens(store: Path, tmp_path: Path) -> None:
    """A response ending in a few tokens at p = 1 on both sides (exact 0.0) is not padding."""
    ends = [[-0.5, -1.2, 0.0, 0.0, 0.0], [-0.1] * 3 + [0.0] * 7, [-2.0, -0.3]]
    path = tmp_path / "ragged.parquet"
    pq.write_table(
        pa.table(
            {"rollout_log_probs": ends, "old_log_probs": [[v * 1.01 for v in x] for x in ends]}
        ),
        path,
    )
    result = mismatchctl.ingest([path], run="r", store=store)
    assert result.tally.model_tokens == 17 and result.tally.padding_kept == 0
    assert any("no mask column" in n for n in result.files[0].record.notes)


def test_pad_token_run_with_ids(store: Path, tmp_path: Path) -> None:
    """With token ids, padding is also a run of the last token id where a side holds 0.0 (the
    trainer side may hold values at padding positions)."""
    ids = [[5, 6, 7] + [0] * 9, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]
    roll = [[-0.5, -0.2, -0.1] + [0.0] * 9, [-0.1] * 12]
    train = [[-0.4, -0.2, -0.1] + [-3.5] * 9, [-0.1] * 12]
    path = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table({"responses": ids, "rollout_log_probs": roll, "old_log_probs": train}), path
    )
    with pytest.raises(InputError) as info:
        mismatchctl.ingest([path], run="r", store=store)
    assert "1 of the 2 samples of this batch end in padding" in info.value.message
    assert "the longest, 9 positions, ends sample `ids#0` (row 0)" in info.value.message


def test_slime_without_loss_masks_is_checked_too(store: Path, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    samples = [
        {
            "rollout_log_probs": torch.tensor([-0.2] * 4 + [0.0] * 10),
            "log_probs": [-0.3] * 4 + [0.0] * 10,
        },
        {"rollout_log_probs": torch.tensor([-0.2] * 14), "log_probs": [-0.25] * 14},
    ]
    path = tmp_path / "train_2.pt"
    torch.save({"format_version": 2, "rollout_id": 2, "samples": samples}, path)
    with pytest.raises(InputError, match="1 of the 2 samples of this batch end in padding"):
        mismatchctl.ingest([path], run="s", store=store)
    result = mismatchctl.ingest([path], run="s", store=store, allow_padding=True)
    assert result.tally.model_tokens == 28 and result.tally.padding_kept == 10


# --- verl's attention_mask -------------------------------------------------------------------


def _arrays(path: Path) -> dict[str, list]:
    return pq.read_table(path).to_pydict()


def _without(path: Path, column: str, out: Path) -> Path:
    pq.write_table(pq.read_table(path).drop_columns([column]), out)
    return out


def test_response_part_of_attention_mask(store: Path, tmp_path: Path) -> None:
    """Without response_mask, the last response_length entries of attention_mask exclude the
    padding: the same model tokens as with response_mask (no tool responses here), and each
    prompt's length kept from the entries before them."""
    nomask = _without(VERL, "response_mask", tmp_path / "verl_step_5.parquet")
    with_mask = mismatchctl.ingest([VERL], run="with", store=store)
    result = mismatchctl.ingest([nomask], run="attn", store=store)
    cols = _arrays(VERL)
    width = len(cols["responses"][0])
    response = np.array([row[-width:] for row in cols["attention_mask"]])
    assert result.tally.model_tokens == with_mask.tally.model_tokens == int(response.sum()) == 32
    assert result.tally.pad_tokens == int((response == 0).sum()) == 32
    prompts = [sum(row[:-width]) for row in cols["attention_mask"]]
    seqs = mismatchctl.open_store(store).scan("attn", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.PROMPT_TOKENS].to_list() == prompts == [3, 4, 5, 6]
    assert seqs[S.PROMPT_LENGTH].to_list() == prompts  # where kv_position counts from
    # with its response_mask, the prompt lengths still come from attention_mask
    seqs = mismatchctl.open_store(store).scan("with", kind="sequences").collect().sort(S.SEQ)
    assert seqs[S.PROMPT_TOKENS].to_list() == prompts
    rows = mismatchctl.open_store(store).scan("attn").collect()
    ref = mismatchctl.open_store(store).scan("with").collect()
    assert rows[S.ROLLOUT].to_list() == ref[S.ROLLOUT].to_list()
    notes = result.files[0].record.notes
    assert any(n.startswith("mask: the response part of `attention_mask` (its last") for n in notes)
    assert "prompt lengths: the prompt part of `attention_mask`" in notes


def test_map_mask_to_attention_mask(store: Path, tmp_path: Path) -> None:
    """`--map mask=attention_mask` takes the response part too (it failed on the length)."""
    ran = cli("ingest", str(VERL), "--run", "m", "--map", "mask=attention_mask", "-q", "--json")
    assert ran.code == 0, ran.err
    assert json.loads(ran.out)["totals"]["model_tokens"] == 32


def test_attention_mask_with_tool_responses_is_refused(store: Path, tmp_path: Path) -> None:
    nomask = _without(VERL_TOOLS, "response_mask", tmp_path / "verl_tools_step_5.parquet")
    before = tree_digest(store)
    ran = cli("ingest", str(nomask), "--run", "t", "-q")
    assert ran.code == 1
    assert ran.err == (
        f"Error: {nomask}: the mask is the response part of `attention_mask`, which covers tool "
        "responses: 11 of the positions it keeps are in runs of one-sided exact 0.0 logprobs (the "
        "first at position 4 of sample `u0` (row 0)), the mark of tool-response tokens that the "
        "engine never scored\n\n"
        "Hint: dump verl's `response_mask` (1 on LLM-generated tokens only) with the batch and "
        "ingest that, or name such a mask with --map mask=<column>.\n"
    )
    assert tree_digest(store) == before
    cols = _arrays(VERL_TOOLS)
    width = len(cols["responses"][0])
    kept = np.array([row[-width:] for row in cols["attention_mask"]]) == 1
    tool = kept & (np.array(cols["response_mask"]) == 0)
    assert int(tool.sum()) == 11  # the tool-response positions the message counts


def test_response_mask_of_the_tool_batch(store: Path) -> None:
    """The same batch with its response_mask: tool responses excluded, numbers as numpy says."""
    result = mismatchctl.ingest([VERL_TOOLS], run="v", store=store)
    cols = _arrays(VERL_TOOLS)
    mask = np.array(cols["response_mask"]) == 1
    roll, train = np.array(cols["rollout_log_probs"]), np.array(cols["old_log_probs"])
    assert result.tally.model_tokens == int(mask.sum())
    assert result.tally.tool_tokens == 11
    whole = mismatchctl.report("v", store=store).whole()
    assert whole is not None
    assert whole.metrics["vllm_kl"] == pytest.approx(_vllm_kl(roll[mask], train[mask]), rel=1e-9)


def _beside_tools(path: Path) -> tuple[Path, int]:
    """A verl batch whose tool responses (rollout 0.0, the trainer's real logprobs) each have a
    model token beside them that the trainer gives p = 1 (exact 0.0 on the trainer side only);
    returns the file without its response_mask and the number of tool-response positions."""
    rng = np.random.default_rng(11)
    segments = [[(5, 1), (12, 0), (4, 1)], [(3, 1), (8, 0), (3, 1)]]
    width = max(sum(n for n, _ in s) for s in segments) + 2
    rows: dict[str, list] = {k: [] for k in ("uid", "prompts", "responses", "attention_mask",
                                              "response_mask", "rollout_log_probs",
                                              "old_log_probs")}  # fmt: skip
    for i, parts in enumerate(segments):
        mask = [m for n, m in parts for _ in range(n)]
        train = [float(np.float32(-v)) for v in rng.exponential(0.8, len(mask)) + 0.01]
        roll = [float(np.float32(t * 1.02)) if m else 0.0 for t, m in zip(train, mask, strict=True)]
        tool = [j for j, m in enumerate(mask) if not m]
        beside = tool[-1] + 1 if i == 0 else tool[0] - 1  # after the first, before the second
        train[beside], roll[beside] = 0.0, -0.004
        pad = width - len(mask)
        rows["uid"].append(f"u{i}")
        rows["prompts"].append([7, 8, 9])
        rows["responses"].append(list(range(100, 100 + len(mask))) + [0] * pad)
        rows["attention_mask"].append([1] * (3 + len(mask)) + [0] * pad)
        rows["response_mask"].append(mask + [0] * pad)
        rows["rollout_log_probs"].append(roll + [0.0] * pad)
        rows["old_log_probs"].append(train + [0.0] * pad)
    table = pa.table(rows)
    pq.write_table(table.drop_columns(["response_mask"]), path)
    return path, 12 + 8


def test_tool_fill_runs_count_tool_positions_only(store: Path, tmp_path: Path) -> None:
    """The refusal counts the tool-response positions, exactly: a model token beside a tool
    response whose *trainer* side is 0.0 (p = 1) is not part of the rollout side's fill (it
    said 22 for these 20)."""
    path, tools = _beside_tools(tmp_path / "verl_beside_step_2.parquet")
    with pytest.raises(InputError) as info:
        mismatchctl.ingest([path], run="t", store=store)
    assert f": {tools} of the positions it keeps are in runs" in info.value.message
    assert "(the first at position 5 of sample `u0` (row 0))" in info.value.message
