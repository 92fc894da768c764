"""Tests of the sample-data generator and of the phenomena the committed sample runs must show.

(a) slow tests (MISMATCHCTL_SLOW_TESTS=1, as .ci/run sets it) run the generator at --size ci once
    per session and check the files are well-formed, then generate them a second time and check
    they are bit-for-bit identical; (b) reads the committed files under sample_data/runs with pyarrow/json
    and numpy only (not the mismatchctl package) and checks each run shows what the manifest says.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from tests.sample_data.moe_routes import MoESequence, differs, read_moe_run, routing  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data"
LOGPROB_TOL = 1e-4
MOE_RUNS = ("moe", "moe-r3", "moe-capture-bug")


@dataclass
class Tokens:
    """Model tokens of a run, flattened: log ratio, rollout logprob, turn index, step, sequence,
    position in the sequence (prompt included: the token's KV position; -1 without a `prompts`
    column) and index in its turn."""

    r: np.ndarray
    lr: np.ndarray
    turn: np.ndarray
    step: np.ndarray
    seq: np.ndarray
    pos: np.ndarray
    dist: np.ndarray


def turn_index(mask: np.ndarray) -> np.ndarray:
    """Turn number per position: a turn is a maximal run of 1s in the mask; -1 elsewhere."""
    starts = (mask == 1) & (np.concatenate(([0], mask[:-1])) == 0)
    return np.where(mask == 1, np.cumsum(starts) - 1, -1)


def index_in_turn(mask: np.ndarray) -> np.ndarray:
    """Per position, its distance from the first token of its turn (0 at a turn's first token)."""
    idx = np.arange(len(mask))
    starts = (mask == 1) & (np.concatenate(([0], mask[:-1])) == 0)
    return idx - np.maximum.accumulate(np.where(starts, idx, 0))


def read_rows(run_dir: Path, fmt: str) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray, int]]:
    """(step, mask, rollout, trainer, offset) per sample, as stored (padded / full-sequence);
    offset = sequence position of the arrays' index 0 (the prompt length in the sequence
    layout, 0 for NeMo-RL's full-sequence arrays, -1 when a dump has no `prompts` column)."""
    rows = []
    if fmt == "parquet-sequence":
        for path in sorted(run_dir.glob("step_*.parquet")):
            table = pq.read_table(path).to_pydict()
            for i in range(len(table["uid"])):
                rows.append(
                    (
                        table["step"][i],
                        np.asarray(table["response_mask"][i], dtype=np.int8),
                        np.asarray(table["rollout_log_probs"][i], dtype=np.float32),
                        np.asarray(table["old_log_probs"][i], dtype=np.float32),
                        len(table["prompts"][i]) if "prompts" in table else -1,
                    )
                )
    else:
        for path in sorted(run_dir.glob("train_data_step*.jsonl")):
            step = int(path.stem.removeprefix("train_data_step"))
            for line in path.read_text().splitlines():
                obj = json.loads(line)
                rows.append(
                    (
                        step,
                        np.asarray(obj["token_loss_mask"], dtype=np.int8),
                        np.asarray(obj["generation_logprobs"], dtype=np.float32),
                        np.asarray(obj["prev_logprobs"], dtype=np.float32),
                        0,
                    )
                )
    return rows


def model_tokens(run_dir: Path, fmt: str) -> Tokens:
    r, lr, turn, step, seq, pos, dist = [], [], [], [], [], [], []
    for i, (st, mask, roll, train, offset) in enumerate(read_rows(run_dir, fmt)):
        sel = mask == 1
        r.append(train[sel].astype(np.float64) - roll[sel].astype(np.float64))
        lr.append(roll[sel].astype(np.float64))
        turn.append(turn_index(mask)[sel])
        step.append(np.full(int(sel.sum()), st))
        seq.append(np.full(int(sel.sum()), i))
        pos.append(offset + np.flatnonzero(sel) if offset >= 0 else np.full(int(sel.sum()), -1))
        dist.append(index_in_turn(mask)[sel])
    return Tokens(*(np.concatenate(x) for x in (r, lr, turn, step, seq, pos, dist)))


def k3(r: np.ndarray) -> np.ndarray:
    return np.expm1(r) - r


def vllm_kl(r: np.ndarray) -> float:
    return float(np.mean(k3(r)))


def sha256_tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_fp32_inference_path_matches_trainer() -> None:
    """With fp32 weights the KV-cache, left-padded, batched path must equal the full forward."""
    import random

    import torch

    sys.path.insert(0, str(SAMPLE))
    from gen.engine import EngineConfig, InferenceEngine, TrainerScorer
    from gen.model import ModelConfig, TinyLM
    from gen.rollout import RolloutShape, make_samples, roll_out, score

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=2)
    state = TinyLM(cfg).state_dict()
    rng = random.Random(0)
    lines = [
        bytes(rng.randrange(32, 127) for _ in range(rng.randint(5, 40))) + b"\n" for _ in range(50)
    ]
    shape = RolloutShape(3, 3)
    samples = make_samples(shape, lines, step=1, seed=0)
    engine = InferenceEngine(cfg, state, EngineConfig(dtype=torch.float32))
    roll_out(engine, samples, shape.limits, torch.Generator().manual_seed(0))
    score(TrainerScorer(cfg, state, EngineConfig().temperature), samples)
    for s in samples:
        model = np.asarray(s.mask) == 1
        diff = np.asarray(s.trainer_lp)[model] - np.asarray(s.rollout_lp)[model]
        assert np.abs(diff).max() < 1e-4, s.uid


@pytest.mark.slow
def test_fp32_moe_paths_record_the_same_routes() -> None:
    """The MoE model with fp32 on both sides: the engine's routes (prefill rows, then one row per
    decode input, kept from the turn that first computed each position) are the trainer's at
    every input position, the logprobs agree, and replaying the engine's routes changes nothing;
    in bf16 the engine's routes differ from the trainer's at some positions."""
    import copy
    import random

    import torch

    sys.path.insert(0, str(SAMPLE))
    from gen.engine import EngineConfig, InferenceEngine, TrainerScorer
    from gen.moe import MoEConfig, MoELM
    from gen.rollout import RolloutShape, make_samples, roll_out, score

    torch.manual_seed(0)
    cfg = MoEConfig(n_layers=2)
    state = MoELM(cfg).state_dict()
    rng = random.Random(0)
    lines = [
        bytes(rng.randrange(32, 127) for _ in range(rng.randint(5, 40))) + b"\n" for _ in range(50)
    ]
    shape = RolloutShape(2, 3)
    flips = 0
    for dtype in (torch.float32, torch.bfloat16):
        samples = make_samples(shape, lines, step=1, seed=0)
        engine = InferenceEngine(cfg, state, EngineConfig(dtype=dtype))
        roll_out(engine, samples, shape.limits, torch.Generator().manual_seed(0))
        scorer = TrainerScorer(cfg, state, EngineConfig().temperature)
        natural, replayed = [copy.copy(s) for s in samples], [copy.copy(s) for s in samples]
        score(scorer, natural)
        score(scorer, replayed, replay=True)
        for a, b in zip(natural, replayed, strict=True):
            n = len(a.sequence)
            assert a.rollout_routes is not None and a.trainer_routes is not None
            assert b.trainer_routes is not None
            assert a.rollout_routes.shape == (n - 1, 2, cfg.top_k), a.uid
            assert a.trainer_routes.shape == (n, 2, cfg.top_k), a.uid
            engine_sets = np.sort(a.rollout_routes, axis=2)
            assert np.array_equal(np.sort(b.trainer_routes[:-1], axis=2), engine_sets)
            differ = (np.sort(a.trainer_routes[:-1], axis=2) != engine_sets).any(axis=(1, 2))
            model = np.asarray(a.mask) == 1
            if dtype == torch.float32:
                assert not differ.any(), a.uid
                for s in (a, b):
                    diff = np.asarray(s.trainer_lp)[model] - np.asarray(s.rollout_lp)[model]
                    assert np.abs(diff).max() < 1e-4, s.uid
            flips += int(differ.sum()) if dtype == torch.bfloat16 else 0
    assert flips > 0


def test_split_kv_per_row_takes_each_path_for_its_own_rows() -> None:
    """With `min_kv_for_split`, rows whose own KV length reaches it get the split-KV kernel's
    output and the other rows the single pass's, bit for bit; and the split kernel without a bug
    matches the single pass to bf16 noise."""
    import torch

    sys.path.insert(0, str(SAMPLE))
    from gen.model import AttentionKernel, decode_attention, split_kv_attention, split_kv_rows

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 4, n, 32, generator=gen).bfloat16() for n in (1, 200, 200))
    valid = torch.ones(3, 200, dtype=torch.bool)
    valid[2, :90] = False  # left padding: row 2 holds 110 keys
    kernel = AttentionKernel(split_kv=True, min_kv_for_split=150, merge_drops_rowsum=True)
    rows = split_kv_rows(kernel, torch.tensor([200, 200, 110]))
    assert rows is not None and rows.tolist() == [True, True, False]
    got = decode_attention(q, k, v, valid, kernel, rows)
    split = split_kv_attention(q, k, v, valid, kernel)
    scores = (q.float() @ k.float().transpose(-1, -2)) / 32**0.5
    exact = torch.softmax(scores.masked_fill(~valid[:, None, None, :], -torch.inf), -1) @ v.float()
    assert torch.equal(got[:2], split[:2]) and not torch.equal(got[2], split[2])
    assert (got[2].float() - exact[2]).abs().max() < 2e-2  # the single pass
    assert (got[:2].float() - exact[:2]).abs().max() > 5e-2  # the faulty combine
    fixed = AttentionKernel(split_kv=True)
    clean = split_kv_attention(q, k, v, valid, fixed)
    assert (clean.float() - exact).abs().max() < 2e-2
    assert split_kv_rows(fixed, torch.tensor([5] * 10)) is None  # a full batch: single pass


# ---------------------------------------------------------------- (a) the generator at --size ci


def generate(out: Path) -> None:
    cmd = [sys.executable, str(SAMPLE / "generate.py"), "--out", str(out / "runs"), "--size", "ci"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, timeout=1800)


@pytest.fixture(scope="session")
def ci_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generator run once per test session at --size ci (about a minute and a half)."""
    out = tmp_path_factory.mktemp("ci_a")
    generate(out)
    return out


def check_row(mask: np.ndarray, roll: np.ndarray, train: np.ndarray, where: str) -> None:
    assert len(mask) == len(roll) == len(train), where
    assert set(np.unique(mask).tolist()) <= {0, 1}, where
    assert np.all(roll[mask == 0] == 0.0) and np.all(train[mask == 0] == 0.0), where
    for side in (roll, train):
        assert np.all(np.isfinite(side)), where
        assert np.all(side[mask == 1] <= LOGPROB_TOL), where
    assert mask.sum() > 0, where


def check_parquet_run(run_dir: Path, tags: dict[str, str]) -> None:
    files = sorted(run_dir.glob("step_*.parquet"))
    assert files, run_dir
    for path in files:
        table = pq.read_table(path)
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        assert {k: meta.get(k) for k in tags} == tags, path
        types = {f.name: f.type for f in table.schema}
        assert types["step"] == pa.int64() and types["reward"] == pa.float64()
        assert types["uid"] == pa.string()
        lists = {"responses": pa.int64(), "response_mask": pa.int8()}
        lists |= {"rollout_log_probs": pa.float32(), "old_log_probs": pa.float32()}
        with_prompts = "prompts" in types
        if with_prompts:  # the per-sequence columns of the added runs
            lists |= {"prompts": pa.int64()}
            assert types["data_source"] == pa.string()
        for name, value_type in lists.items():
            assert pa.types.is_list(types[name]) and types[name].value_type == value_type, name
        data = table.to_pydict()
        assert len(set(data["uid"])) == table.num_rows, path
        assert set(data["step"]) == {int(path.stem.split("_")[1])}, path
        widths = {len(x) for x in data["responses"]}
        assert len(widths) == 1, f"{path}: responses are right-padded to one length"
        for i in range(table.num_rows):
            mask = np.asarray(data["response_mask"][i])
            assert len(data["responses"][i]) == len(mask)
            if with_prompts:
                assert 32 <= len(data["prompts"][i]) <= 80, f"{path}:{i}"
                assert data["data_source"][i].endswith(".py"), f"{path}:{i}"
            check_row(
                mask,
                np.asarray(data["rollout_log_probs"][i]),
                np.asarray(data["old_log_probs"][i]),
                f"{path}:{i}",
            )


def check_nemo_run(run_dir: Path) -> None:
    files = sorted(run_dir.glob("train_data_step*.jsonl"))
    assert files, run_dir
    for path in files:
        for n, line in enumerate(path.read_text().splitlines()):
            obj = json.loads(line)
            mask = np.asarray(obj["token_loss_mask"])
            assert len(obj["token_ids"]) == obj["input_lengths"] == len(mask), f"{path}:{n}"
            roll, train = np.asarray(obj["generation_logprobs"]), np.asarray(obj["prev_logprobs"])
            assert mask[0] == 0 and roll[0] == 0.0 and train[0] == 0.0
            check_row(mask, roll, train, f"{path}:{n}")


def check_moe_run(run_dir: Path, run: dict) -> None:
    """Both sides' routes on every response: ids in [0, experts) or -1 rows, distinct per layer;
    the engine's recorded for each input position (prompt + response but its last token), the
    trainer's for every position (or one position late: the capture bug)."""
    ingest = run["ingest"]
    seqs = read_moe_run(run_dir, ingest["routes_topk"])
    assert seqs, run_dir
    shifted = run["name"] == "moe-capture-bug"
    for i, s in enumerate(seqs):
        where = f"{run_dir}: response {i}"
        real = int(np.flatnonzero(s.mask)[-1]) + 1  # the response ends with a model turn
        for side in (s.rollout, s.trainer):
            assert side.shape == (s.prompt + len(s.mask), 4, ingest["routes_topk"]), where
            recorded = (side >= 0).all(axis=(1, 2))
            assert np.all(recorded | (side == -1).all(axis=(1, 2))), where
            assert side.max() < ingest["num_experts"], where
            ids = np.sort(side[recorded], axis=2)
            assert np.all(ids[:, :, 1:] != ids[:, :, :-1]), where
        # the SGLang encoding covers the positions [last prompt position, seqlen - 1), the
        # others start at position 0
        sglang = run["name"] == "moe-r3"
        first, end = (s.prompt - 1, len(s.rollout) - 1) if sglang else (0, len(s.rollout))
        rollout = (s.rollout >= 0).all(axis=(1, 2))
        assert np.flatnonzero(rollout).tolist() == list(range(first, s.prompt + real - 1)), where
        trainer = (s.trainer >= 0).all(axis=(1, 2))
        expected = range(first + shifted, min(s.prompt + real + shifted, end))
        assert np.flatnonzero(trainer).tolist() == list(expected), where


@pytest.mark.slow
def test_ci_generation_is_well_formed(ci_dir: Path) -> None:
    out = ci_dir
    manifest = json.loads((out / "manifest.json").read_text())
    names = {run["name"] for run in manifest["runs"]}
    assert {
        "ref",
        "raw-logprobs",
        "stale-weights",
        "faulty-attn",
        "fp32-head",
        "synthetic-gpus",
    } <= names
    for run in manifest["runs"]:
        run_dir = out / run["path"]
        if run["format"] == "parquet-sequence":
            check_parquet_run(run_dir, run["tags"])
        else:
            assert run["format"] == "nemo-jsonl"
            check_nemo_run(run_dir)
        if run["name"] in MOE_RUNS:
            check_moe_run(run_dir, run)
    stale = pq.read_table(next((out / "runs" / "stale-weights").glob("step_*.parquet"))).to_pydict()
    assert all(v == s - 1 for v, s in zip(stale["weight_version"], stale["step"], strict=True))
    gpus = pq.read_table(next((out / "runs" / "synthetic-gpus").glob("step_*.parquet"))).to_pydict()
    assert set(gpus["gpu"]) == {"H20", "L20", "A100"}
    # the first runs keep their columns; the added ones carry the per-sequence prompt columns
    ref = pq.read_schema(out / "runs" / "ref" / "step_0001.parquet").names
    ref_b = pq.read_table(out / "runs" / "ref-b" / "step_0001.parquet")
    assert "prompts" not in ref and {"prompts", "data_source"} <= set(ref_b.column_names)
    names = [run["name"] for run in manifest["runs"]]
    assert names[names.index("ref-b") :] == ["ref-b", *MOE_RUNS]
    assert set(manifest["generator"]["moe"]) == {"model", "train", "final_train_loss"}
    # the runs' tokenizer beside the manifest: the committed one's vocabulary (id i = byte i)
    written = json.loads((out / manifest["tokenizer"]).read_text())["model"]["vocab"]
    assert written == json.loads((SAMPLE / "tokenizer.json").read_text())["model"]["vocab"]
    assert sorted(written.values()) == list(range(256))


@pytest.mark.slow
def test_ci_generation_of_some_runs_keeps_the_others(ci_dir: Path, tmp_path: Path) -> None:
    """`--runs` regenerates the named runs only: the same bytes as the full generation (their
    model trained again from the same seed: a second generation is reproducible), the other
    runs' files untouched, the manifest as the full generation wrote it. (A full second
    generation, four minutes of CI, is not run: the dense runs share this code path.)"""
    out = tmp_path / "runs"
    shutil.copytree(ci_dir / "runs", out)
    shutil.copytree(ci_dir / "logs", tmp_path / "logs")
    shutil.copy(ci_dir / "manifest.json", tmp_path / "manifest.json")
    for name in MOE_RUNS:
        shutil.rmtree(out / name)
    (out / "ref" / "marker").write_text("kept")
    cmd = [sys.executable, str(SAMPLE / "generate.py"), "--out", str(out), "--size", "ci"]
    subprocess.run(
        [*cmd, "--runs", ",".join(MOE_RUNS)], check=True, cwd=ROOT, capture_output=True, timeout=900
    )
    (out / "ref" / "marker").unlink()
    assert sha256_tree(tmp_path) == sha256_tree(ci_dir)


# ------------------------------------------------------- (b) phenomena in the committed runs


@pytest.fixture(scope="module")
def committed() -> dict[str, Tokens]:
    manifest_path = SAMPLE / "manifest.json"
    if not manifest_path.is_file():
        pytest.skip("no committed sample data")
    manifest = json.loads(manifest_path.read_text())
    return {
        run["name"]: model_tokens(SAMPLE / run["path"], run["format"]) for run in manifest["runs"]
    }


@pytest.mark.slow
def test_committed_files_are_well_formed() -> None:
    manifest_path = SAMPLE / "manifest.json"
    if not manifest_path.is_file():
        pytest.skip("no committed sample data")
    manifest = json.loads(manifest_path.read_text())
    for run in manifest["runs"]:
        if run["format"] == "parquet-sequence":
            check_parquet_run(SAMPLE / run["path"], run["tags"])
        else:
            check_nemo_run(SAMPLE / run["path"])
    files = [p for p in SAMPLE.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    models = [p for p in files if p.parent == SAMPLE / "model"]
    # the runs, code and logs stay under 10 MB; the shipped checkpoint (bisect's) under 15 MB
    assert sum(p.stat().st_size for p in files if p not in models) < 10 * 1024 * 1024
    assert models and sum(p.stat().st_size for p in models) <= 15 * 1024 * 1024


@pytest.mark.slow
def test_later_turns_mismatch_more_than_first_turns(committed: dict[str, Tokens]) -> None:
    ref = committed["ref"]
    first, later = ref.r[ref.turn == 0], ref.r[ref.turn >= 1]
    assert later.size and first.size
    assert vllm_kl(later) > vllm_kl(first)


def test_faulty_attention_exceeds_reference(committed: dict[str, Tokens]) -> None:
    faulty, ref = committed["faulty-attn"], committed["ref"]
    assert vllm_kl(faulty.r) > 5 * vllm_kl(ref.r)
    # only some steps take the faulty split-KV path
    per_step = [vllm_kl(faulty.r[faulty.step == s]) for s in np.unique(faulty.step)]
    ref_level = vllm_kl(ref.r)
    assert any(v > 20 * ref_level for v in per_step)
    assert any(v < 3 * ref_level for v in per_step)


def test_raw_logprobs_show_a_mean_offset(committed: dict[str, Tokens]) -> None:
    r = committed["raw-logprobs"].r
    sem = r.std() / np.sqrt(r.size)
    assert abs(r.mean()) > 8 * sem
    ref = committed["ref"].r
    assert abs(r.mean()) > 10 * abs(ref.mean())


def test_low_probability_tokens_carry_the_kl(committed: dict[str, Tokens]) -> None:
    ref = committed["ref"]
    low = np.exp(ref.lr) < 1e-2
    contributions = k3(ref.r)
    token_share = low.mean()
    kl_share = contributions[low].sum() / contributions.sum()
    assert kl_share > 2 * token_share


def test_stale_weights_exceed_reference(committed: dict[str, Tokens]) -> None:
    assert vllm_kl(committed["stale-weights"].r) > 5 * vllm_kl(committed["ref"].r)


def test_top_p_mean_ratio_is_the_kept_mass(committed: dict[str, Tokens]) -> None:
    if "top-p" not in committed:
        pytest.skip("no top-p run")
    ratio = float(np.mean(np.exp(committed["top-p"].r)))
    assert 0.8 < ratio < 0.99


def test_synthetic_gpus_follow_published_magnitudes() -> None:
    run_dir = SAMPLE / "runs" / "synthetic-gpus"
    if not run_dir.is_dir():
        pytest.skip("no committed sample data")
    per_gpu: dict[str, list[float]] = {}
    for path in sorted(run_dir.glob("step_*.parquet")):
        data = pq.read_table(path).to_pydict()
        for gpu in ("H20", "L20", "A100"):
            rs = [
                np.asarray(t, np.float64)[np.asarray(m) == 1]
                - np.asarray(o, np.float64)[np.asarray(m) == 1]
                for g, m, o, t in zip(
                    data["gpu"],
                    data["response_mask"],
                    data["rollout_log_probs"],
                    data["old_log_probs"],
                    strict=True,
                )
                if g == gpu
            ]
            per_gpu.setdefault(gpu, []).append(vllm_kl(np.concatenate(rs)))
    assert all(4e-4 < v < 1.2e-3 for v in per_gpu["H20"])
    assert all(8e-4 < v < 1.2e-2 for v in per_gpu["L20"])
    assert all(8e-3 < v < 1.5 for v in per_gpu["A100"])
    assert per_gpu["A100"][-1] > per_gpu["A100"][0]


# ------------------------------------------ (b) the subtle causes, measured against the baseline


def ratio(target: Tokens, base: Tokens, sel_t: np.ndarray, sel_b: np.ndarray) -> float:
    """Mean K3 of a cell in the target over the same cell in the baseline."""
    return vllm_kl(target.r[sel_t]) / vllm_kl(base.r[sel_b])


def need(committed: dict[str, Tokens], *names: str) -> None:
    """Skip when the committed sample data predates the added runs (regenerate it)."""
    missing = [n for n in names if n not in committed]
    if missing:
        pytest.skip(f"not in the committed sample data: {', '.join(missing)}")


def test_ref_b_is_a_healthy_pair_of_ref(committed: dict[str, Tokens]) -> None:
    need(committed, "ref-b", "stale-subtle", "improved")
    ref, ref_b = committed["ref"], committed["ref-b"]
    assert 0.6 < vllm_kl(ref_b.r) / vllm_kl(ref.r) < 1.6
    assert vllm_kl(ref_b.r[ref_b.turn >= 1]) > vllm_kl(ref_b.r[ref_b.turn == 0])
    prompts = {
        name: [
            p
            for f in sorted((SAMPLE / "runs" / name).glob("*.parquet"))
            for p in pq.read_table(f, columns=["prompts"]).column(0).to_pylist()
        ]
        for name in ("ref-b", "stale-subtle", "improved")
    }
    assert prompts["stale-subtle"] == prompts["improved"]  # every other run shares ref's loader
    pairs = zip(prompts["improved"], prompts["ref-b"], strict=True)
    assert sum(a == b for a, b in pairs) == 0


def test_faulty_attn_subtle_is_confined_to_long_kv_in_some_steps(
    committed: dict[str, Tokens],
) -> None:
    need(committed, "faulty-attn-subtle", "ref-b")
    subtle, ref = committed["faulty-attn-subtle"], committed["ref"]
    assert 2 * vllm_kl(ref.r) < vllm_kl(subtle.r) < min(10 * vllm_kl(ref.r), 1e-3)
    ref = committed["ref-b"]  # the healthy run with positions (ref has no `prompts` column)
    long_t, long_b = subtle.pos >= 192, ref.pos >= 192
    # short KV positions (the single-pass path) are at ref level in every step
    assert ratio(subtle, ref, ~long_t, ~long_b) < 1.5
    per_step = {
        s: ratio(subtle, ref, long_t & (subtle.step == s), long_b & (ref.step == s))
        for s in np.unique(subtle.step)
    }
    # 8.8-21.8 in the hit steps (2, 3, 7), at most 6.6 elsewhere, against ref-b as regenerated
    # with the shipped checkpoint and as it was before (10.4-17.2)
    hit = [s for s, v in per_step.items() if v > 8]
    assert hit and len(hit) < len(per_step)  # some steps' batches take the faulty path
    in_hit = np.isin(subtle.step, hit)
    excess = k3(subtle.r).sum() - vllm_kl(ref.r) * subtle.r.size
    assert (k3(subtle.r[long_t & in_hit]).sum()) > 0.7 * excess  # most of it (74-76% measured)


def test_stale_subtle_spreads_evenly(committed: dict[str, Tokens]) -> None:
    need(committed, "stale-subtle", "ref-b")
    stale, ref = committed["stale-subtle"], committed["ref-b"]
    overall = vllm_kl(stale.r) / vllm_kl(ref.r)
    assert 2 < overall < 10
    cells = [
        (stale.turn == 0, ref.turn == 0),
        (stale.turn >= 1, ref.turn >= 1),
        (stale.pos < 128, ref.pos < 128),
        ((stale.pos >= 128) & (stale.pos < 192), (ref.pos >= 128) & (ref.pos < 192)),
        (stale.pos >= 192, ref.pos >= 192),
    ]
    for sel_t, sel_b in cells:
        assert 0.4 * overall < ratio(stale, ref, sel_t, sel_b) < 2.5 * overall
    for s in np.unique(stale.step):
        assert ratio(stale, ref, stale.step == s, ref.step == s) > 2
    tables = [
        pq.read_table(p) for p in sorted((SAMPLE / "runs" / "stale-subtle").glob("*.parquet"))
    ]
    assert all("weight_version" not in t.column_names for t in tables)
    assert all(t.schema.metadata[b"weight_lag"] == b"0" for t in tables)


def test_spiky_6_has_two_faulty_steps(committed: dict[str, Tokens]) -> None:
    need(committed, "spiky-6")
    spiky, ref = committed["spiky-6"], committed["ref"]
    per_step = np.array([vllm_kl(spiky.r[spiky.step == s]) for s in range(1, 7)])
    assert sorted(np.unique(spiky.step).tolist()) == [1, 2, 3, 4, 5, 6]
    order = np.argsort(per_step)
    spikes, others = per_step[order[-2:]], per_step[order[:-2]]
    assert spikes.min() >= 5 * np.median(others)
    assert np.all(others < 2 * vllm_kl(ref.r)) and np.all(spikes < 30 * vllm_kl(ref.r))


def test_improved_is_below_ref(committed: dict[str, Tokens]) -> None:
    need(committed, "improved")
    assert vllm_kl(committed["improved"].r) < 0.8 * vllm_kl(committed["ref"].r)


def test_template_fault_sits_after_tool_responses(committed: dict[str, Tokens]) -> None:
    need(committed, "template-fault")
    tmpl, ref = committed["template-fault"], committed["ref"]
    first = ratio(tmpl, ref, tmpl.turn == 0, ref.turn == 0)
    assert 0.6 < first < 1.6  # the first turn saw the same text on both sides
    later = tmpl.turn >= 1
    head, tail = later & (tmpl.dist < 8), later & (tmpl.dist >= 8)
    assert vllm_kl(tmpl.r[head]) > 10 * vllm_kl(tmpl.r[tail])
    assert vllm_kl(tmpl.r[later & (tmpl.dist == 0)]) > vllm_kl(
        tmpl.r[later & (tmpl.dist >= 4) & (tmpl.dist < 8)]
    )
    # the rest of the turn attends to the re-rendered text too: above ref's, a decade below the head
    tail_ref = vllm_kl(ref.r[(ref.turn >= 1) & (ref.dist >= 8)])
    assert tail_ref < vllm_kl(tmpl.r[tail]) < vllm_kl(tmpl.r[head]) / 10


# ------------------------------------------------------------ (b) the MoE runs' routing


@pytest.fixture(scope="module")
def moe() -> dict[str, list[MoESequence]]:
    manifest_path = SAMPLE / "manifest.json"
    if not manifest_path.is_file():
        pytest.skip("no committed sample data")
    runs = {r["name"]: r for r in json.loads(manifest_path.read_text())["runs"]}
    if not set(MOE_RUNS) <= set(runs):
        pytest.skip(f"not in the committed sample data: {', '.join(MOE_RUNS)}")
    return {
        name: read_moe_run(SAMPLE / runs[name]["path"], runs[name]["ingest"]["routes_topk"])
        for name in MOE_RUNS
    }


@pytest.mark.slow
def test_committed_moe_runs_are_well_formed() -> None:
    manifest_path = SAMPLE / "manifest.json"
    if not manifest_path.is_file():
        pytest.skip("no committed sample data")
    runs = [r for r in json.loads(manifest_path.read_text())["runs"] if r["name"] in MOE_RUNS]
    if len(runs) != len(MOE_RUNS):
        pytest.skip("the committed sample data has no MoE runs")
    for run in runs:
        check_moe_run(SAMPLE / run["path"], run)
        assert run["tags"]["routing_replay"] == ("off" if run["name"] == "moe" else "r3")


def test_moe_runs_share_their_rollouts(moe: dict[str, list[MoESequence]]) -> None:
    """One set of rollouts per step, scored with and without replay: the runs differ only in the
    trainer's logprobs and routes (and the capture bug only in how its routes were dumped)."""
    natural, r3, bug = (moe[name] for name in MOE_RUNS)
    assert len(natural) == len(r3) == len(bug) > 0
    for a, b, c in zip(natural, r3, bug, strict=True):
        assert np.array_equal(a.mask, b.mask) and np.array_equal(a.mask, c.mask)
        assert np.array_equal(a.rollout[a.prompt - 1 :], b.rollout[b.prompt - 1 :])
        assert np.array_equal(a.rollout, c.rollout)
        assert np.array_equal(b.r, c.r)  # the capture bug's logprobs are moe-r3's
    assert not all(np.array_equal(a.r, b.r) for a, b in zip(natural, r3, strict=True))


def test_moe_replay_agrees_everywhere_and_lowers_the_mismatch(
    moe: dict[str, list[MoESequence]],
) -> None:
    natural, r3 = routing(moe["moe"]), routing(moe["moe-r3"])
    assert r3.compared == natural.compared > 0.9 * natural.model_tokens
    assert r3.token_agreement == 1.0 and len(r3.flipped) == 0
    k3_r3 = np.concatenate([r3.flipped, r3.same]).mean()
    k3_natural = np.concatenate([natural.flipped, natural.same]).mean()
    assert k3_r3 < k3_natural / 3  # sample_data/README.md: the replayed run's K3 is far lower
    # what is left is the bf16 noise of the positions that route alike on both sides
    assert 0.5 < k3_r3 / natural.same.mean() < 2


def test_moe_natural_routing_has_real_flips(moe: dict[str, list[MoESequence]]) -> None:
    """Near-tied router logits pick other experts in bf16 than in fp32: a few percent of the
    positions, and the tokens they produce carry most of the mismatch."""
    natural = routing(moe["moe"])
    assert 0.8 < natural.token_agreement < 0.995
    assert len(natural.flipped) >= 50
    assert natural.flipped.mean() > 20 * natural.same.mean()
    assert natural.k3_share_flipped > 0.5


def test_moe_capture_bug_is_detected(moe: dict[str, list[MoESequence]]) -> None:
    """Replay is on, yet most compared positions differ: the trainer's routes are the engine's
    written one position late (row t at t + 1), which the logprobs (moe-r3's) do not show."""
    bug = routing(moe["moe-capture-bug"])
    assert 1 - bug.token_agreement > 0.3  # the share of compared positions that violate replay
    for s in moe["moe-capture-bug"]:
        assert not differs(s.rollout[:-1], s.trainer[1:]).any()
