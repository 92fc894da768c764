"""The recipes of docs/recipes/: each snippet, kept in tests/recipes/, is the text of its page and
runs here on its framework's batch, into ``DumpWriter``; the dump is ingested and every model
token checked against the batch.

Where the framework installs on CPU (verl, TRL) and is installed, the batch is the framework's own
object (verl's ``DataProto``; a real ``GRPOTrainer`` run); otherwise, and always for OpenRLHF, it
is built with the keys, shapes, dtypes and padding of the framework's source (cited at each
builder). slime and NeMo-RL write dumps ingest reads already: their pages' commands run on files
in those frameworks' formats.
"""

from __future__ import annotations

import re
import shlex
import shutil
import uuid
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl import schema as S
from mismatchctl.dump import DumpWriter
from tests.helpers import FIXTURES, cli
from tests.trl_grpo import sample_with_bf16_copy, tiny_grpo_setup

torch = pytest.importorskip("torch")

ROOT = Path(__file__).parents[2]
RECIPES = ROOT / "tests" / "recipes"
MARKED = re.compile(r"# --8<-- \[start:recipe\]\n(.*?)\n# --8<-- \[end:recipe\]", re.S)


def snippet(name: str) -> str:
    return MARKED.search((RECIPES / name).read_text()).group(1).strip()


@pytest.mark.parametrize(
    ("source", "page"),
    [
        ("verl_dump.py", "verl.md"),
        ("trl_dump.py", "trl.md"),
        ("trl_trainer.py", "trl.md"),
        ("openrlhf_dump.py", "openrlhf.md"),
    ],
)
def test_each_page_shows_its_tested_snippet(source: str, page: str) -> None:
    text = (ROOT / "docs" / "recipes" / page).read_text()
    assert f"```python\n{snippet(source)}\n```" in text


# ---------------------------------------------------------------------------------------------
# checking a dump against the batch it came from


@dataclass
class Expected:
    """One response: its model tokens (position in the row -> rollout, trainer, token id)."""

    step: int
    sample_id: str
    tokens: dict[int, tuple[float, float, int]]
    prompt_length: int | None = None
    reward: float | None = None


def expected_rows(step, ids, rollout, trainer, mask, token_ids, starts=None) -> list[Expected]:
    """Rows of 2-D tensors (from ``starts[i]`` on, when given) as the dump must hold them."""
    out = []
    for i, sid in enumerate(ids):
        start = 0 if starts is None else int(starts[i])
        keep = np.flatnonzero(mask[i, start:].numpy())
        tok = {
            int(p): (
                float(rollout[i, start + p].float()),
                float(trainer[i, start + p].float()),
                int(token_ids[i, start + p]),
            )
            for p in keep
        }
        out.append(Expected(step, sid, tok))
    return out


def check_ingest(dumps: Path, store: Path, expected: list[Expected]) -> mismatchctl.RunInfo:
    api.ingest([dumps], "r", store=store)
    st = mismatchctl.open_store(store)
    tokens = st.scan("r").collect()
    cols = (S.STEP, S.SAMPLE_ID, S.POSITION, S.ROLLOUT, S.TRAINER, S.TOKEN_ID)
    got = {
        (step, sid, pos): (lr, lt, tok)
        for step, sid, pos, lr, lt, tok in zip(*(tokens[c].to_list() for c in cols), strict=True)
    }
    want = {(e.step, e.sample_id, p): v for e in expected for p, v in e.tokens.items()}
    assert got == want
    seqs = st.scan("r", kind="sequences").collect()
    assert sorted(zip(seqs[S.STEP].to_list(), seqs[S.SAMPLE_ID].to_list(), strict=True)) == sorted(
        (e.step, e.sample_id) for e in expected
    )
    rewards = dict(zip(seqs[S.SAMPLE_ID].to_list(), seqs[S.REWARD].to_list(), strict=True))
    for e in expected:
        if e.reward is not None:
            assert rewards[e.sample_id] == pytest.approx(e.reward, rel=1e-6)
    return api.run_info("r", store=store)


def prompt_lengths_in(dumps: Path) -> dict[str, int]:
    out = {}
    for path in sorted(dumps.glob("*.parquet")):
        t = pq.read_table(path, columns=["sample_id", "prompt_length"]).to_pydict()
        out.update(zip(t["sample_id"], t["prompt_length"], strict=True))
    return out


# ---------------------------------------------------------------------------------------------
# verl


def verl_tensors(rng: np.random.Generator, rows: int = 6, plen: int = 8, rlen: int = 12) -> dict:
    """A PPO trainer batch after ``batch = batch.union(old_log_prob)`` (verl 0.9.1): the agent
    loop's ``_postprocess`` (experimental/agent_loop/agent_loop.py) pads prompts left and
    responses right, ``response_mask`` (int64) is 0 on tool tokens and padding,
    ``rollout_log_probs`` (float32) is padded with 0.0, ``rm_scores`` holds the score at the last
    response token; ``old_log_probs`` is the actor's float32 output at every position."""
    t = {
        "prompts": torch.zeros((rows, plen), dtype=torch.int64),
        "responses": torch.zeros((rows, rlen), dtype=torch.int64),
        "response_mask": torch.zeros((rows, rlen), dtype=torch.int64),
        "attention_mask": torch.zeros((rows, plen + rlen), dtype=torch.int64),
        "rollout_log_probs": torch.zeros((rows, rlen), dtype=torch.float32),
        "old_log_probs": torch.from_numpy(-rng.exponential(1.0, (rows, rlen)).astype(np.float32)),
        "rm_scores": torch.zeros((rows, rlen), dtype=torch.float32),
    }
    for i in range(rows):
        p, r = int(rng.integers(1, plen + 1)), int(rng.integers(3, rlen + 1))
        t["prompts"][i, plen - p :] = torch.from_numpy(rng.integers(1, 1000, p))
        t["attention_mask"][i, plen - p : plen + r] = 1
        t["responses"][i, :r] = torch.from_numpy(rng.integers(1, 1000, r))
        mask = np.ones(r, dtype=np.int64)
        if i % 2:
            mask[1:3] = 0  # a tool response
        t["response_mask"][i, :r] = torch.from_numpy(mask)
        lr = (t["old_log_probs"][i, :r].numpy() + rng.normal(0, 0.02, r)).clip(max=0) * mask
        t["rollout_log_probs"][i, :r] = torch.from_numpy(lr.astype(np.float32))
        t["rm_scores"][i, r - 1] = float(rng.integers(2))
    t["input_ids"] = torch.cat([t["prompts"], t["responses"]], dim=1)
    return t


def verl_batch(tensors: dict, uids: np.ndarray, step: int, real: bool) -> Any:
    non_tensor = {"uid": uids, "data_source": np.array(["gsm8k"] * len(uids), dtype=object)}
    if real:
        from verl import DataProto

        return DataProto.from_dict(
            tensors, non_tensors=non_tensor, meta_info={"global_steps": step}
        )
    return SimpleNamespace(batch=dict(tensors), non_tensor_batch=non_tensor, meta_info={})


@pytest.mark.parametrize("real", [True, False], ids=["verl-DataProto", "verl-keys"])
def test_verl_recipe(tmp_path: Path, real: bool) -> None:
    if real:
        pytest.importorskip(
            "verl", reason="verl is not installed (pip install --no-deps verl==0.9.1)"
        )
    from tests.recipes.verl_dump import dump_mismatch

    rng = np.random.default_rng(3)
    expected, prompts = [], {}
    with DumpWriter(tmp_path / "dumps", tags={"engine": "vllm"}) as writer:
        for step in (1, 2):
            t = verl_tensors(rng)
            groups = [str(uuid.UUID(int=int(rng.integers(2**62)))) for _ in range(3)]
            uids = np.array([g for g in groups for _ in range(2)], dtype=object)  # rollout.n = 2
            entropys = torch.from_numpy(rng.exponential(1.0, t["responses"].shape).astype("f4"))
            dump_mismatch(writer, verl_batch(t, uids, step, real), step, entropys)
            ids = [f"{u}/{row}" for row, u in enumerate(uids)]
            rows = expected_rows(
                step,
                ids,
                t["rollout_log_probs"],
                t["old_log_probs"],
                t["response_mask"],
                t["responses"],
            )
            for e, score in zip(rows, t["rm_scores"].sum(-1).tolist(), strict=True):
                e.reward = score
            expected += rows
            plen = t["prompts"].shape[1]
            prompts.update(zip(ids, t["attention_mask"][:, :plen].sum(-1).tolist(), strict=True))
            assert [p.name for p in writer.written][-1] == f"step_{step:08d}.parquet"  # flushed
    info = check_ingest(tmp_path / "dumps", tmp_path / "store", expected)
    assert info.tags == {"engine": "vllm"} and info.steps == [1, 2]
    assert info.tool_tokens == 2 * 3 * 2  # two per odd row
    assert prompt_lengths_in(tmp_path / "dumps") == prompts


def test_verl_recipe_sits_where_the_page_says() -> None:
    """The lines of ``RayPPOTrainer.fit`` (verl/trainer/ppo/ray_trainer.py) the page anchors the
    recipe to, in the installed verl's source (read, not imported: it needs Ray)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        pytest.skip("verl is not installed (pip install --no-deps verl==0.9.1)")
    source = (Path(spec.origin).parent / "trainer" / "ppo" / "ray_trainer.py").read_text()
    fit = source[source.index("    def fit(self):") :]
    end = fit.find("\n    def ", 1)
    fit = fit if end < 0 else fit[:end]
    page = (ROOT / "docs" / "recipes" / "verl.md").read_text()
    for anchor in (
        "self.global_steps = 0",
        'entropys = old_log_prob.batch["entropys"]',
        "batch = batch.union(old_log_prob)",
    ):
        assert anchor in fit and anchor in page
    assert fit.index('entropys = old_log_prob.batch["entropys"]') < fit.index(
        "batch = batch.union(old_log_prob)"
    )


# ---------------------------------------------------------------------------------------------
# TRL


def trl_output(rng: np.random.Generator, rows: int = 4, plen: int = 6, clen: int = 10) -> dict:
    """``GRPOTrainer._generate_and_score_completions``' output (TRL 1.16): ``prompt_ids`` padded
    left with the pad token and ``prompt_mask`` (int64), ``completion_ids`` padded right and
    ``completion_mask`` (int64), ``sampling_per_token_logps`` (float32, padded with 0.0, NaN where
    vLLM returned no logprob), ``old_per_token_logps`` (float32), ``tool_mask`` (padded with 1)."""
    pad = 0
    out = {
        "prompt_ids": torch.full((rows, plen), pad, dtype=torch.int64),
        "prompt_mask": torch.zeros((rows, plen), dtype=torch.int64),
        "completion_ids": torch.full((rows, clen), pad, dtype=torch.int64),
        "completion_mask": torch.zeros((rows, clen), dtype=torch.int64),
        "sampling_per_token_logps": torch.zeros((rows, clen), dtype=torch.float32),
        "old_per_token_logps": torch.from_numpy(-rng.exponential(1, (rows, clen)).astype("f4")),
        "tool_mask": torch.ones((rows, clen), dtype=torch.int64),
        "advantages": torch.zeros(rows),
    }
    for i in range(rows):
        p, c = int(rng.integers(1, plen + 1)), int(rng.integers(2, clen + 1))
        out["prompt_ids"][i, plen - p :] = torch.from_numpy(rng.integers(1, 500, p))
        out["prompt_mask"][i, plen - p :] = 1
        out["completion_ids"][i, :c] = torch.from_numpy(rng.integers(1, 500, c))
        out["completion_mask"][i, :c] = 1
        lr = out["old_per_token_logps"][i, :c].numpy() + rng.normal(0, 0.02, c)
        out["sampling_per_token_logps"][i, :c] = torch.from_numpy(lr.clip(max=0).astype("f4"))
        if i == 1 and c > 2:
            out["tool_mask"][i, 1] = 0  # a tool result token
            out["sampling_per_token_logps"][i, 1] = float("nan")
    return out


def test_trl_recipe_on_the_generation_output(tmp_path: Path) -> None:
    from tests.recipes.trl_dump import dump_mismatch

    rng = np.random.default_rng(11)
    expected = []
    with DumpWriter(tmp_path / "dumps", rank=0) as writer:
        for step in (0, 2):
            out = trl_output(rng)
            dump_mismatch(writer, out, step)
            mask = out["completion_mask"] * out["tool_mask"]
            ids = [f"step_{step:08d}.rank_0#{i}" for i in range(len(mask))]
            expected += expected_rows(
                step,
                ids,
                out["sampling_per_token_logps"],
                out["old_per_token_logps"],
                mask,
                out["completion_ids"],
            )
            lengths = pq.read_table(writer.written[-1], columns=["prompt_length"])
            assert lengths["prompt_length"].to_pylist() == out["prompt_mask"].sum(-1).tolist()
    info = check_ingest(tmp_path / "dumps", tmp_path / "store", expected)
    assert info.tool_tokens == 1 * 2


def test_trl_recipe_refuses_a_batch_without_both_sides(tmp_path: Path) -> None:
    from tests.recipes.trl_dump import dump_mismatch

    out = trl_output(np.random.default_rng(0))
    del out["old_per_token_logps"]
    with DumpWriter(tmp_path) as writer, pytest.raises(ValueError, match="no old_per_token_logps"):
        dump_mismatch(writer, out, 0)


@pytest.mark.slow
def test_trl_recipe_in_a_real_grpo_training_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DumpingGRPOTrainer`` trains a tiny random model on CPU for two steps. The rollouts come
    from a ``rollout_func`` that samples from a bf16 copy of the model (as an inference engine
    would) and returns its logprobs; with ``num_iterations=2`` the trainer recomputes
    ``old_per_token_logps``: both sides, as with vLLM."""
    trl = pytest.importorskip("trl", reason="TRL is not installed (pip install trl)")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental
    from tests.recipes.trl_trainer import DumpingGRPOTrainer

    seen: list[tuple[int, dict]] = []

    class Recording(DumpingGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen.append((self.state.global_step, {k: v for k, v in out.items()}))
            return out

    model, tokenizer, dataset = tiny_grpo_setup()
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=6,
        num_iterations=2,
        max_steps=2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    trainer = Recording(
        model=model,
        reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=sample_with_bf16_copy,
        dump_dir=str(tmp_path / "dumps"),
        dump_tags={"engine": "bf16-sampler"},
    )
    trainer.train()
    assert seen, "the trainer generated no batch"
    assert [p.name for p in trainer.mismatch_dump.written] == [
        f"step_{step:08d}.rank_0.parquet" for step, _ in seen
    ]
    differ = [o["sampling_per_token_logps"] != o["old_per_token_logps"] for _, o in seen]
    assert any(d.any() for d in differ)  # bf16 sampler vs fp32 trainer: a real mismatch
    expected = []
    for step, out in seen:
        mask = out["completion_mask"] * out.get("tool_mask", 1)
        name = f"step_{step:08d}.rank_0"
        ids = [f"{name}#{i}" for i in range(len(mask))]
        expected += expected_rows(
            step,
            ids,
            out["sampling_per_token_logps"],
            out["old_per_token_logps"],
            mask,
            out["completion_ids"],
        )
    info = check_ingest(tmp_path / "dumps", tmp_path / "store", expected)
    assert info.tags == {"engine": "bf16-sampler"}
    assert info.model_tokens == sum(len(e.tokens) for e in expected) > 0


# ---------------------------------------------------------------------------------------------
# OpenRLHF


@dataclass
class Experience:
    """The fields of ``openrlhf.trainer.ppo_utils.experience.Experience`` (OpenRLHF 0.11.0) the
    recipe reads, with their shapes: ``sequences`` (B, T) prompt + response token ids,
    ``action_mask`` (B, T-1), ``action_log_probs`` and ``rollout_log_probs`` (B, T-1), position
    j scoring token j + 1; ``rewards`` (B,); ``index``: positions in the rollout batch."""

    sequences: Any = None
    attention_mask: Any = None
    action_mask: Any = None
    action_log_probs: Any = None
    rollout_log_probs: Any = None
    rewards: Any = None
    index: list[int] | None = None


def openrlhf_sample(rng: np.random.Generator, index: int) -> Experience:
    """One response as ``SamplesGenerator._process_response_into_experience`` builds it: the
    action span(s) marked in the observation tokens, ``action_mask`` and the vLLM logprobs (0.0
    on prompt tokens) shifted by one (``[1:]``); the actor's ``action_log_probs`` as
    ``Actor.forward`` returns them (masked: ``log_probs * action_mask``)."""
    tool = index % 3 == 2
    p, r = int(rng.integers(2, 6)), int(rng.integers(5 if tool else 2, 9))
    n = p + r
    seq = torch.from_numpy(rng.integers(3, 1000, n))
    action = torch.zeros(n, dtype=torch.long)
    action[p:] = 1
    if tool:
        action[p + 1 : p + 3] = 0  # an observation (tool) span inside the response
    lr = torch.from_numpy((-rng.exponential(1.0, n)).astype("f4")) * action
    lt = (lr + torch.from_numpy(rng.normal(0, 0.02, n).astype("f4"))).clamp(max=0) * action
    return Experience(
        sequences=seq.unsqueeze(0),
        attention_mask=torch.ones(1, n, dtype=torch.long),
        action_mask=action[1:].unsqueeze(0),
        action_log_probs=lt[1:].unsqueeze(0),
        rollout_log_probs=lr[1:].unsqueeze(0),
        rewards=torch.tensor([float(index % 2)]),
        index=[index],
    )


def concat_experiences(items: list[Experience], pad_token_id: int) -> Experience:
    """``Experience.concat_experiences``: tensors right-padded (``zero_pad_sequences``, with
    ``pad_token_id`` for ``sequences``, 0 otherwise), lists chained."""
    merged = {}
    for f in fields(Experience):
        values = [getattr(e, f.name) for e in items]
        if isinstance(values[0], list):
            merged[f.name] = [v for vs in values for v in vs]
        elif values[0].dim() == 1:
            merged[f.name] = torch.cat(values)
        else:
            width = max(v.shape[1] for v in values)
            pad = pad_token_id if f.name == "sequences" else 0
            merged[f.name] = torch.cat(
                [torch.nn.functional.pad(v, (0, width - v.shape[1]), value=pad) for v in values]
            )
    return Experience(**merged)


def test_openrlhf_recipe(tmp_path: Path) -> None:
    from tests.recipes.openrlhf_dump import dump_mismatch

    rng = np.random.default_rng(5)
    expected, prompt_lengths = [], {}
    with DumpWriter(tmp_path / "dumps") as writer:
        for step in (0, 1):
            samples = [openrlhf_sample(rng, i) for i in range(7)]
            experiences = [concat_experiences(samples[i : i + 3], 2) for i in range(0, 7, 3)]
            dump_mismatch(writer, experiences, step)
            for exp in experiences:
                start = exp.action_mask.int().argmax(dim=1)
                ids = [str(i) for i in exp.index]
                seq = exp.sequences[:, 1:]  # action position j scores token j + 1
                expected += expected_rows(
                    step,
                    ids,
                    exp.rollout_log_probs,
                    exp.action_log_probs,
                    exp.action_mask,
                    seq,
                    start,
                )
                for e, reward in zip(expected[-len(ids) :], exp.rewards.tolist(), strict=True):
                    e.reward = reward
                prompt_lengths.update(
                    {f"{step}/{i}": int(s) + 1 for i, s in zip(ids, start, strict=True)}
                )
    info = check_ingest(tmp_path / "dumps", tmp_path / "store", expected)
    assert info.steps == [0, 1] and info.sequences == 14
    assert info.tool_tokens == 2 * 2 * 2  # two in samples 2 and 5 of each step
    for step in (0, 1):
        t = pq.read_table(tmp_path / "dumps" / f"step_{step:08d}.parquet").to_pydict()
        got = {f"{step}/{i}": n for i, n in zip(t["sample_id"], t["prompt_length"], strict=True)}
        assert got == {k: v for k, v in prompt_lengths.items() if k.startswith(f"{step}/")}


# ---------------------------------------------------------------------------------------------
# slime and NeMo-RL: the pages' commands, on files in those frameworks' formats


def page_commands(page: str) -> list[str]:
    text = (ROOT / "docs" / "recipes" / page).read_text()
    return [line for line in text.splitlines() if line.startswith("mismatchctl ingest ")]


@pytest.mark.parametrize(
    ("page", "files"),
    [
        (
            "slime.md",
            {"slime_train_3.pt": "debug/train_3.pt", "slime_train_4.pt": "debug/train_4.pt"},
        ),
        (
            "nemo-rl.md",
            {
                "train_data_step3.jsonl": "logs/exp_001/train_data_step3.jsonl",
                "train_data_step4.jsonl": "logs/exp_001/train_data_step4.jsonl",
            },
        ),
    ],
)
def test_switched_on_dumps_ingest_as_the_page_says(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, page: str, files: dict
) -> None:
    for fixture, where in files.items():
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, tmp_path / where)
    monkeypatch.chdir(tmp_path)
    commands = page_commands(page)
    assert commands
    for command in commands:
        ran = cli(*shlex.split(command)[1:])
        assert ran.code == 0, ran.err
    info = api.runs(store=store)
    assert len(info) == 1 and info[0].steps == [3, 4] and info[0].model_tokens > 0


def test_readme_and_the_writer_page_link_every_recipe() -> None:
    pages = sorted(p.name for p in (ROOT / "docs" / "recipes").glob("*.md"))
    assert pages == ["nemo-rl.md", "openrlhf.md", "prime-rl.md", "slime.md", "trl.md", "verl.md"]
    readme = (ROOT / "README.md").read_text()
    for page in pages:
        assert f"(docs/recipes/{page})" in readme
    assert "(recipes/)" in (ROOT / "docs" / "dump.md").read_text()
