"""The Monitor recipes of docs/recipes/: each snippet (tests/recipes/*_monitor.py, the text of
its page) runs on its framework's tensors, with the keys, shapes, dtypes and padding of the
framework's source (the builders of tests/dump/test_recipes.py for verl and TRL, cited there;
slime's and prime-rl's below), over two steps. Every model token is then in the store with its
two logprobs, and the summary the recipe logs holds the framework's names with the report's
numbers."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mismatchctl import Monitor, api, open_store
from mismatchctl import schema as S
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M
from tests.dump.test_recipes import snippet, trl_output, verl_tensors

torch = pytest.importorskip("torch")
ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("source", "page"),
    [
        ("verl_monitor.py", "verl.md"),
        ("trl_monitor.py", "trl.md"),
        ("slime_monitor.py", "slime.md"),
        ("prime_rl_monitor.py", "prime-rl.md"),
    ],
)
def test_each_page_shows_its_tested_snippet(source: str, page: str) -> None:
    text = (ROOT / "docs" / "recipes" / page).read_text()
    assert f"```python\n{snippet(source)}\n```" in text


def stored(store: Path) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """(step, sequence of the step in order) -> its model tokens' (rollout, trainer)."""
    t = open_store(store).scan("r").collect().sort([S.STEP, S.SEQ, S.POSITION])
    out: dict[tuple[int, int], list[tuple[float, float]]] = {}
    seqs: dict[int, list[int]] = {}
    for step, seq, lr, lt in zip(
        *(t[c].to_list() for c in (S.STEP, S.SEQ, S.ROLLOUT, S.TRAINER)), strict=True
    ):
        order = seqs.setdefault(step, [])
        if not order or order[-1] != seq:
            order.append(seq)
        out.setdefault((step, len(order) - 1), []).append((lr, lt))
    return out


def expected(step: int, lr, lt, mask) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """The model tokens of padded or ragged rows (rows without one are not in the token rows)."""
    out = {}
    for k, (a, b, m) in enumerate(zip(lr, lt, mask, strict=True)):
        keep = np.flatnonzero(np.asarray(m, dtype=bool))
        if len(keep):
            out[(step, k)] = [(float(a[i]), float(b[i])) for i in keep]
    return out


def test_verl_monitor_recipe(tmp_path: Path) -> None:
    from tests.recipes.verl_monitor import monitor_mismatch

    rng = np.random.default_rng(3)
    mon = Monitor("r", tmp_path / "s", style="verl")
    want = {}
    for step in (1, 2):
        t = verl_tensors(rng)
        uids = np.array(
            [str(uuid.UUID(int=int(rng.integers(2**62)))) for _ in range(6)], dtype=object
        )
        batch = SimpleNamespace(batch=dict(t), non_tensor_batch={"uid": uids}, meta_info={})
        metrics: dict = {"actor/lr": 1e-6}
        assert monitor_mismatch(mon, batch, step, metrics) is not None
        assert metrics["mismatch/rollout_corr/k3_kl"] == metrics["mismatch/vllm_kl"] > 0
        assert "mismatch/training/rollout_probs_diff_max" in metrics
        want.update(
            expected(
                step,
                t["rollout_log_probs"].numpy(),
                t["old_log_probs"].numpy(),
                t["response_mask"].numpy(),
            )
        )
    assert _compact(stored(tmp_path / "s")) == _compact(want)
    rows = api.report(["r"], store=tmp_path / "s", by=["step"]).split(K.RUN, K.STEP)
    assert math.isclose(rows[-1].metrics[M.VLLM_KL], metrics["mismatch/vllm_kl"], rel_tol=1e-9)


def test_trl_monitor_recipe(tmp_path: Path) -> None:
    from tests.recipes.trl_monitor import monitor_mismatch

    rng = np.random.default_rng(11)
    mon = Monitor("r", tmp_path / "s", style="trl")
    want = {}
    for step in (0, 2):
        out = trl_output(rng)
        summary = monitor_mismatch(mon, out, step)
        assert summary["mismatch/sampling/sampling_logp_difference/max"] > 0
        mask = (out["completion_mask"] * out["tool_mask"]).numpy()
        want.update(
            expected(
                step,
                out["sampling_per_token_logps"].numpy(),
                out["old_per_token_logps"].numpy(),
                mask,
            )
        )
    assert _compact(stored(tmp_path / "s")) == _compact(want)


def slime_rollout_data(rng: np.random.Generator, samples: int = 5) -> dict:
    """``MegatronTrainRayActor.train_actor``'s ``rollout_data`` after ``compute_log_prob``
    (slime 624b824a, backends/megatron_utils/actor.py): per sample, 1-D tensors over its
    response: ``rollout_log_probs`` (float32, moved to the device by ``_get_rollout_data``),
    ``log_probs`` (the actor's, float32) and ``loss_masks`` (int, 0 on tool responses)."""
    data: dict = {
        "rollout_log_probs": [],
        "log_probs": [],
        "loss_masks": [],
        "response_lengths": [],
    }
    for i in range(samples):
        n = int(rng.integers(3, 20))
        lt = -rng.exponential(0.8, n).astype(np.float32)
        lr = np.minimum(lt + rng.normal(0, 0.03, n), 0).astype(np.float32)
        mask = np.ones(n, np.int32)
        if i % 2 and n > 6:
            mask[2:4] = 0
        data["rollout_log_probs"].append(torch.from_numpy(lr))
        data["log_probs"].append(torch.from_numpy(lt))
        data["loss_masks"].append(torch.from_numpy(mask))
        data["response_lengths"].append(n)
    return data


def test_slime_monitor_recipe(tmp_path: Path) -> None:
    from tests.recipes.slime_monitor import monitor_mismatch

    rng = np.random.default_rng(5)
    mon = Monitor("r", tmp_path / "s")
    want = {}
    for rollout_id in (0, 1):
        data = slime_rollout_data(rng)
        summary = monitor_mismatch(mon, rollout_id, data)
        assert summary["mismatch/tokens"] == sum(int(m.sum()) for m in data["loss_masks"])
        want.update(
            expected(
                rollout_id, *(data[k] for k in ("rollout_log_probs", "log_probs", "loss_masks"))
            )
        )
    assert monitor_mismatch(mon, 2, {"rollout_log_probs": []}) == {}  # not the last stage
    assert _compact(stored(tmp_path / "s")) == _compact(want)


def prime_micro_batch(rng: np.random.Generator, lengths: list[int]) -> tuple[dict, dict, object]:
    """prime-rl's packed micro-batch in ``trainer/rl/train.py`` (PrimeIntellect-ai/prime-rl
    559b4477): ``[1, seq]`` tensors of whole sequences end to end (``sequence_lengths``):
    ``inference_logprobs`` (float32, 0 on the context), the model output's ``logprobs`` and
    ``entropy`` (shifted right: position 0 padded), ``loss_mask`` (bool, the sampled spans)."""
    total = sum(lengths)
    lt = -rng.exponential(0.8, total).astype(np.float32)
    lr = np.minimum(lt + rng.normal(0, 0.03, total), 0).astype(np.float32)
    mask = np.zeros(total, bool)
    start = 0
    for n in lengths:
        mask[start + n // 3 : start + n] = True  # the context first, then the sampled span
        start += n
    lr[~mask] = 0.0
    out = {
        "logprobs": torch.from_numpy(lt)[None],
        "entropy": torch.from_numpy(rng.exponential(1.0, total).astype(np.float32))[None],
    }
    return (
        out,
        {"sequence_lengths": lengths},
        torch.from_numpy(mask)[None],
        torch.from_numpy(lr)[None],
    )


def test_prime_rl_monitor_recipe(tmp_path: Path) -> None:
    from tests.recipes.prime_rl_monitor import monitor_micro_batch

    rng = np.random.default_rng(9)
    mon = Monitor("r", tmp_path / "s", style="prime-rl")
    want, k3 = {}, []
    for step in (3, 4):
        n = 0
        for lengths in ([12, 30, 7], [25, 9]):  # two micro-batches of one step
            out, mb, mask, inference = prime_micro_batch(rng, lengths)
            monitor_micro_batch(mon, step, out, inference, mask, mb["sequence_lengths"])
            split = [t.squeeze(0).split(lengths) for t in (inference, out["logprobs"], mask)]
            for a, b, m in zip(*split, strict=True):
                want[(step, n)] = [(float(a[i]), float(b[i])) for i in np.flatnonzero(m.numpy())]
                r = (b.double() - a.double())[m]
                k3 += (torch.expm1(r) - r).tolist()
                n += 1
        summary = mon.step_summary()
        assert summary["mismatch_kl/all/max"] == pytest.approx(max(k3), rel=1e-12)
        mon.flush()
        k3 = []
    assert _compact(stored(tmp_path / "s")) == _compact(want)


def _compact(rows: dict) -> list:
    """The stored sequences of each step in order, without the empty ones' places."""
    return [v for _, v in sorted(rows.items())]
