"""What the Monitor says and refuses: the summary under each framework's names, the alerts of
``watch`` against the store's earlier steps, steps ended by a new step or flushed twice, and
the errors of bad inputs."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from mismatchctl import Monitor, UsageError, api
from mismatchctl.engines import plan as K
from mismatchctl.stats import registry as M

torch = pytest.importorskip("torch")


def tensors(seed: int, noise: float, rows: int = 16, width: int = 48) -> tuple:
    """Padded float32 logprobs (the trainer's, and the rollout's with ``noise`` of log ratio)
    and a response mask with right padding."""
    rng = np.random.default_rng(seed)
    lt = -rng.exponential(0.6, (rows, width))
    lr = np.minimum(lt + rng.normal(0, noise, (rows, width)), 0.0)
    mask = (np.arange(width)[None, :] < rng.integers(8, width, rows)[:, None]).astype(np.int64)
    return tuple(
        torch.from_numpy(a.astype(np.float32 if a.dtype.kind == "f" else a.dtype))
        for a in (lr, lt, mask)
    )


def test_the_summary_speaks_each_frameworks_names(tmp_path: Path) -> None:
    lr, lt, mask = tensors(1, 0.05)
    mon = Monitor("r", tmp_path / "s", style="verl")
    mon.update(0, lr, lt, mask)
    m = mon.metrics()
    verl = mon.step_summary(prefix="mismatch/")
    assert verl["mismatch/rollout_corr/k3_kl"] == verl["mismatch/vllm_kl"] == m[M.VLLM_KL]
    assert verl["mismatch/rollout_corr/kl"] == m[M.KL_K1]
    assert verl["mismatch/training/rollout_probs_diff_max"] == m[M.PROB_ABS_DIFF_MAX]
    assert verl["mismatch/training/rollout_actor_probs_pearson_corr"] == m[M.PROB_PEARSON]
    assert all(k.startswith("mismatch/") for k in verl)
    trl = mon.step_summary(style="trl")
    assert trl["sampling/sampling_logp_difference/mean"] == m[M.ABS_LOG_RATIO_MEAN]
    assert "rollout_corr/kl" not in trl
    prime = mon.step_summary(style="prime-rl")
    r = (lt.double() - lr.double())[mask.bool()]
    k3 = torch.expm1(r) - r
    assert prime["mismatch_kl/all/mean"] == pytest.approx(float(k3.mean()), rel=1e-12)
    assert prime["mismatch_kl/all/max"] == pytest.approx(float(k3.max()), rel=1e-12)
    with pytest.raises(UsageError, match=r"^style `wandb`: expected one of mismatchctl, verl, "):
        mon.step_summary(style="wandb")


def test_an_undefined_number_is_left_out(tmp_path: Path) -> None:
    """One token: no correlation (None) in the summary, which a logger could not take."""
    mon = Monitor("r", tmp_path / "s")
    mon.update(0, np.array([[-0.5, 0.0]]), np.array([[-0.4, 0.0]]), np.array([[1, 0]]))
    assert mon.metrics()[M.PROB_PEARSON] is None
    summary = mon.step_summary()
    assert M.PROB_PEARSON not in summary and summary[M.TOKENS] == 1.0


def test_a_spike_alerts_as_watch_against_the_stores_earlier_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "s"
    with Monitor("r", store) as first:  # the run's first steps, by an earlier process
        for step in range(4):
            assert first.update(step, *tensors(step, 0.02)) == []
    assert first.flush() == []  # closed: nothing pending
    mon = Monitor("r", store)  # a restart: its baseline is what the store holds
    mon.update(4, *tensors(4, 0.02))
    mon.update(5, *tensors(5, 0.4))  # ends step 4, quiet
    with caplog.at_level(logging.WARNING, logger="mismatchctl.monitor"):
        alerts = mon.flush()
    assert {a.check for a in alerts} == {"spike", "band"}
    line = mon.lines[-1]
    assert line.step == 5 and line.recent_steps == 5 and line.change > 3
    assert alerts[0].localized is not None  # explain of the step against its quiet steps
    assert "run r step 5" in caplog.text and "spike" in caplog.text
    rows = api.report(["r"], store=store, by=["step"]).split(K.RUN, K.STEP)
    assert [int(g.by[K.STEP]) for g in rows] == [0, 1, 2, 3, 4, 5]
    assert rows[-1].metrics[M.VLLM_KL] == pytest.approx(line.vllm_kl, rel=1e-12)


def test_a_new_step_ends_the_one_before_and_returns_its_alerts(tmp_path: Path) -> None:
    mon = Monitor("r", tmp_path / "s", explain=False)
    assert mon.update(0, *tensors(0, 0.5)) == []
    alerts = mon.update(1, *tensors(1, 0.01))
    assert [a.check for a in alerts] == ["band"]  # step 0 entered a high band from the start
    assert mon.step == 1 and mon.lines[-1].step == 0


def test_a_step_flushed_twice_is_stored_whole(tmp_path: Path) -> None:
    """A flush in the middle of a step: the rest of the step is a second source, and the
    aggregates (the summary, the second line) are of the whole step."""
    mon = Monitor("r", tmp_path / "s", explain=False)
    a, b = tensors(0, 0.05), tensors(1, 0.05)
    mon.update(3, *a)
    mon.flush()
    mon.update(3, *b)
    mon.close()
    names = [Path(f.path).name for f in api.run_info("r", store=tmp_path / "s").sources]
    assert names == ["step_00000003.parquet", "step_00000003.part_1.parquet"]
    assert mon.lines[-1].update and mon.lines[-1].tokens == int(a[2].sum() + b[2].sum())
    whole = api.report(["r"], store=tmp_path / "s").whole()
    assert whole.metrics[M.TOKENS] == mon.metrics()[M.TOKENS]
    assert math.isclose(whole.metrics[M.VLLM_KL], mon.metrics()[M.VLLM_KL], rel_tol=1e-12)


def test_bad_inputs_are_refused_naming_the_place(tmp_path: Path) -> None:
    mon = Monitor("r", tmp_path / "s")
    lr, lt, mask = tensors(0, 0.05)
    lt[2, 5] = float("nan")
    with pytest.raises(UsageError, match=r"trainer_logprobs is nan at row 2, position 5"):
        mon.update(0, lr, lt, mask)
    lt[2, 5] = float("nan")
    mask[2, 5] = 0
    mon.update(0, lr, lt, mask)  # a NaN at a masked position is not read
    bad = mask.clone()
    bad[1, 1] = 2
    with pytest.raises(UsageError, match=r"mask: value 2 at \(1, 1\)"):
        mon.update(0, lr, lt, bad)
    with pytest.raises(UsageError, match=r"trainer_logprobs: shape \(16, 47\)"):
        mon.update(0, lr, lt[:, :-1], mask)
    with pytest.raises(UsageError, match="torch tensor"):
        mon.update(0, lr.numpy(), lt, mask)
    with pytest.raises(UsageError, match="step 0: add\\(\\) gives other columns"):
        mon.update(0, lr, lt, mask, sample_ids=[str(i) for i in range(16)])
    mon.close()
    with pytest.raises(UsageError, match="closed Monitor"):
        mon.update(1, lr, lt, mask)


def test_batch_ids_and_entropy_given_to_the_monitor_are_split_keys(tmp_path: Path) -> None:
    """``batch_ids`` lands in the sequence rows' batch role (``report --by batch_size``, each
    batch's size counted from the step) and ``entropy`` in the token rows (``--by entropy``),
    as the same columns of an ingested dump do."""
    rng = np.random.default_rng(3)
    rows, width = 6, 12
    lt = -rng.exponential(0.8, (rows, width))
    lr = (lt + rng.normal(0, 0.05, (rows, width))).clip(max=0)
    mask = np.ones((rows, width), np.int64)
    mon = Monitor("b", tmp_path / "store")
    mon.update(
        1, lr, lt, mask,
        batch_ids=np.array([0, 0, 0, 0, 1, 1]),
        entropy=rng.exponential(1.0, (rows, width)),
    )  # fmt: skip
    mon.flush()
    mon.close()
    rep = api.report(["b"], store=tmp_path / "store", by=["batch_size"])
    sizes = {g.by[K.BATCH_SIZE]: g.metrics[M.TOKENS] for g in rep.split(K.BATCH_SIZE)}
    assert sizes == {4: 4 * width, 2: 2 * width}
    ent = api.report(["b"], store=tmp_path / "store", by=["entropy"]).split(K.ENTROPY)
    assert len(ent) > 1 and "(none)" not in {str(g.by[K.ENTROPY]) for g in ent}
