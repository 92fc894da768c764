"""The calibration corpus's fault knobs (sample_data/gen/), each on tiny tensors or a tiny model:
each does what it claims, and left at its default leaves the plain path as it was."""

from __future__ import annotations

import copy
import os
import random
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool
torch = pytest.importorskip("torch")
pytest.importorskip("pyarrow")

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"
sys.path.insert(0, str(SAMPLE))

from gen.calib_weights import (  # noqa: E402
    SCHEDULES,
    WEIGHTS,
    Weights,
    kept_iterations,
    mixed,
    reload_jump,
)
from gen.catalog import CATALOG, check_catalog  # noqa: E402
from gen.catalog_trainer import TRAINER_BF16  # noqa: E402
from gen.edits import EDITS, RENDERS, append_stop, apply_edit  # noqa: E402
from gen.engine import (  # noqa: E402
    NEWLINE,
    TRAINER_DTYPES,
    EngineConfig,
    InferenceEngine,
    TrainerScorer,
    TurnLimits,
    WaveEngine,
    sample_tokens,
)
from gen.faults import (  # noqa: E402
    FaultHooks,
    NumericPath,
    SplitKLinear,
    fp8_round,
    merged_chunks,
)
from gen.model import ModelConfig, TinyLM, dense_attention  # noqa: E402
from gen.rollout import RolloutShape, Sample, make_samples, roll_out, score  # noqa: E402
from gen.sampling import Processors, TokenHistory, apply_penalties, truncate  # noqa: E402
from gen.train import TrainConfig, Trained  # noqa: E402

TINY = ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_len=320)
SHAPE = RolloutShape(2, 2, prompt_min=16, prompt_max=40, limits=TurnLimits(10, 4))


def tiny_state(seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return TinyLM(TINY).state_dict()


def lines() -> list[bytes]:
    rng = random.Random(0)
    return [
        bytes(rng.randrange(32, 127) for _ in range(rng.randint(5, 30))) + b"\n" for _ in range(40)
    ]


def rollouts(cfg: EngineConfig, state: dict[str, torch.Tensor] | None = None) -> list[Sample]:
    samples = make_samples(SHAPE, lines(), step=1, seed=0, loader="t")
    engine = InferenceEngine(TINY, state or tiny_state(), cfg)
    roll_out(engine, samples, SHAPE.limits, torch.Generator().manual_seed(0))
    return samples


def test_top_k_keeps_k_ids_renormalised() -> None:
    logp = torch.log_softmax(torch.randn(3, 256, generator=torch.Generator().manual_seed(1)), -1)
    out = truncate(logp, Processors(top_k=5))
    kept = torch.isfinite(out)
    assert kept.sum(dim=1).tolist() == [5, 5, 5]
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(3), atol=1e-6)
    assert torch.equal(kept, logp >= logp.topk(5, dim=1).values[:, -1:])


def test_min_p_drops_tokens_below_its_share_of_the_top() -> None:
    logp = torch.log_softmax(torch.randn(2, 256, generator=torch.Generator().manual_seed(2)), -1)
    out = truncate(logp, Processors(min_p=0.2))
    top = logp.exp().amax(dim=1, keepdim=True)
    assert torch.equal(torch.isfinite(out), logp.exp() >= 0.2 * top)
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(2), atol=1e-6)


def test_repetition_penalty_touches_only_the_context_ids() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, -1.0, 0.5]])
    history = TokenHistory([[0, 1]], vocab=5)
    out = apply_penalties(logits, Processors(repetition_penalty=2.0), history)
    assert out.tolist() == [[1.0, -4.0, 1.0, -1.0, 0.5]]  # positive / 2, negative x 2
    history.add(torch.tensor([3]))  # a generated token joins the context
    out = apply_penalties(logits, Processors(repetition_penalty=2.0), history)
    assert out[0, 3].item() == -2.0 and out[0, 4].item() == 0.5


def test_frequency_and_presence_count_generated_tokens_only() -> None:
    logits = torch.zeros(1, 4)
    history = TokenHistory([[0]], vocab=4)  # a prompt token is not an output token
    for token in (2, 2, 3):
        history.add(torch.tensor([token]))
    freq = apply_penalties(logits, Processors(frequency_penalty=0.5), history)
    assert freq.tolist() == [[0.0, 0.0, -1.0, -0.5]]
    presence = apply_penalties(logits, Processors(presence_penalty=0.5), history)
    assert presence.tolist() == [[0.0, 0.0, -0.5, -0.5]]


def test_logit_bias_and_bad_words_touch_only_their_ids() -> None:
    logits = torch.zeros(2, 6)
    out = apply_penalties(logits, Processors(logit_bias=((1, 1.5),), bad_ids=(4,)), None)
    assert out[:, 1].tolist() == [1.5, 1.5] and torch.isinf(out[:, 4]).all()
    assert (out[:, [0, 2, 3, 5]] == 0).all()


def test_processors_change_the_reported_logprob_not_the_raw_one() -> None:
    logits = torch.randn(4, 256, generator=torch.Generator().manual_seed(3))
    plain = sample_tokens(logits, EngineConfig(), torch.Generator().manual_seed(0))
    same = sample_tokens(
        logits, EngineConfig(processors=Processors()), torch.Generator().manual_seed(0)
    )
    assert torch.equal(plain[0], same[0]) and torch.equal(plain[1], same[1])
    cfg = EngineConfig(processors=Processors(top_k=3))
    tokens, reported = sample_tokens(logits, cfg, torch.Generator().manual_seed(0))
    full = torch.log_softmax(logits / 0.9, -1).gather(1, tokens[:, None]).squeeze(1)
    assert (reported > full).all()  # renormalised over 3 ids: above the full distribution's
    raw_cfg = EngineConfig(logprobs_mode="raw", processors=Processors(top_k=3))
    tokens, raw = sample_tokens(logits, raw_cfg, torch.Generator().manual_seed(0))
    assert torch.allclose(raw, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1))


def test_fp8_round_trip_error_is_bounded() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4)) * 4
    x = x[x.abs() > 0.05]  # normal range of e4m3 (subnormals below 2^-6)
    for kind, bound in (("e4m3", 2.0**-4), ("e5m2", 2.0**-3)):
        err = ((fp8_round(x, kind) - x).abs() / x.abs()).max().item()
        assert 0 < err <= bound, kind
    assert torch.equal(fp8_round(torch.tensor([1e4]), "e4m3"), torch.tensor([448.0]))


def test_split_k_sums_in_the_activations_dtype() -> None:
    lin = torch.nn.Linear(64, 8, bias=True)
    x = torch.randn(3, 1, 64)
    assert torch.allclose(SplitKLinear(lin, 8)(x), lin(x), atol=1e-5)  # fp32: a reordering
    lin16, x16 = copy.deepcopy(lin).to(torch.bfloat16), x.to(torch.bfloat16)
    split = SplitKLinear(lin16, 32)(x16)
    assert not torch.equal(split, lin16(x16))
    assert torch.allclose(split.float(), lin16(x16).float(), atol=0.1)
    variant = SplitKLinear(lin16, 16, decode_below=4)
    assert variant.n_splits(x16) == 5  # a decode batch of 3 rows: 16 // 3 splits
    wide = torch.cat([x16, x16[:1]])
    assert variant.n_splits(wide) == 1 and torch.equal(variant(wide), lin16(wide))
    assert variant.n_splits(x16.expand(3, 2, 64)) == 1  # a prefill is never split
    assert torch.allclose(SplitKLinear(lin, 5)(x), lin(x), atol=1e-5)  # 64 = 5 x 13 - 1
    unread = SplitKLinear(lin, 5, drop_tail=True)  # 5 splits of 12: inputs 60-63 never read
    expected = torch.nn.functional.linear(x[..., :60], lin.weight[:, :60], lin.bias)
    assert torch.allclose(unread(x), expected, atol=1e-5)
    assert torch.allclose(SplitKLinear(lin, 4, drop_tail=True)(x), lin(x), atol=1e-5)


def test_chunk_merge_without_the_bug_is_plain_attention() -> None:
    q, k, v = (torch.randn(2, 2, 10, 8) for _ in range(3))
    allowed = torch.ones(10, 10, dtype=torch.bool).tril()[None, None].expand(2, 1, 10, 10)
    positions = torch.arange(10).expand(2, 10)
    chunk = positions // 4
    before = (chunk[:, None, :, None] > chunk[:, None, None, :]) & allowed
    plain = dense_attention(q, k, v, allowed)
    good = merged_chunks(q, k, v, before, allowed & ~before)
    assert torch.allclose(good, plain, atol=1e-5)
    for bug in ("merge", "swap"):
        bad = merged_chunks(q, k, v, before, allowed & ~before, bug)
        assert torch.allclose(bad[:, :, :4], plain[:, :, :4], atol=1e-5)  # the first chunk
        assert not torch.allclose(bad[:, :, 4:], plain[:, :, 4:], atol=1e-3)


def test_prefill_last_faults_change_only_the_last_query_row() -> None:
    valid = torch.tensor([[False, False, True, True], [True, True, True, True]])
    allowed = torch.ones(4, 4, dtype=torch.bool).tril()[None, None] & valid[:, None, None, :]
    pad = FaultHooks(NumericPath(prefill_last="pad_key"), torch.ones(1)).prefill_mask(
        allowed, valid
    )
    diff = (pad != allowed).nonzero().tolist()
    assert diff == [[0, 0, 3, 1]]  # row 0 (padded): its last query sees the slot left of it
    own = FaultHooks(NumericPath(prefill_last="no_self"), torch.ones(1)).prefill_mask(
        allowed, valid
    )
    assert (own != allowed).nonzero().tolist() == [[0, 0, 3, 3], [1, 0, 3, 3]]
    blind = FaultHooks(NumericPath(prefill_last="pad_all"), torch.ones(1)).prefill_mask(
        allowed, valid
    )
    assert (blind != allowed).nonzero().tolist() == [[0, 0, 3, 0], [0, 0, 3, 1]]  # both pads


def test_a_default_numeric_path_leaves_the_rollouts_as_they_were() -> None:
    plain = rollouts(EngineConfig())
    same = rollouts(EngineConfig(path=NumericPath(tp=1)))
    assert [s.rollout_lp for s in plain] == [s.rollout_lp for s in same]
    fp8 = rollouts(EngineConfig(path=NumericPath(kv_cache="e4m3")))
    assert [s.rollout_lp for s in plain] != [s.rollout_lp for s in fp8]


def test_a_stale_prefix_cache_changes_only_the_requests_that_hit_it() -> None:
    shape = SHAPE
    state, stale = tiny_state(0), tiny_state(1)
    out = []
    for old in (state, stale):
        cfg = EngineConfig(dtype=torch.float32, path=NumericPath(prefix_cache=True))
        engine = InferenceEngine(TINY, state, cfg, old)
        samples = make_samples(shape, lines(), step=1, seed=0, loader="t")
        hits = lambda s: len(s.prompt) if s.uid.endswith("-r0") else 0  # noqa: E731
        roll_out(engine, samples, shape.limits, torch.Generator().manual_seed(0), hits)
        out.append(samples)
    for fresh, served in zip(*out, strict=True):
        first = served.mask.index(0) if 0 in served.mask else len(served.mask)
        same = np.allclose(fresh.rollout_lp[:first], served.rollout_lp[:first], atol=1e-5)
        assert same != served.uid.endswith("-r0"), served.uid  # same weights: same numbers


def test_the_wave_engine_serves_every_request() -> None:
    engine = WaveEngine(TINY, tiny_state(), EngineConfig(), max_batch=3)
    contexts = [list(b"def f(x):\n"), list(b"import os\n")] * 4
    out = engine.generate(contexts, SHAPE.limits, torch.Generator().manual_seed(0))
    plain, gen = InferenceEngine(TINY, tiny_state(), EngineConfig()), torch.Generator()
    gen.manual_seed(0)
    waves = [plain.generate(contexts[i : i + 3], SHAPE.limits, gen) for i in (0, 3, 6)]
    assert out == [seq for wave in waves for seq in wave]  # three waves of at most 3 requests


def test_waves_split_the_step_by_uid_and_label_each_response() -> None:
    from gen.calib_build import batch_columns, label_waves, wave_groups

    samples = make_samples(RolloutShape(40, 4), lines(), step=1, seed=0, loader="t")
    large, small = wave_groups(samples, (12, 4))
    assert sorted(map(id, large + small)) == sorted(map(id, samples))
    assert 0.15 < len(small) / len(samples) < 0.35  # a quarter, by uid hash
    again = wave_groups(copy.deepcopy(samples), (12, 4))[1]
    assert [s.uid for s in again] == [s.uid for s in small]  # the uid decides, not the order
    members = samples[:10]
    assert label_waves(members, 4, 3) == 6
    assert [s.batch for s in members] == [(3, 4)] * 4 + [(4, 4)] * 4 + [(5, 2)] * 2
    columns = batch_columns(members)
    assert columns["batch_id"].to_pylist() == [3] * 4 + [4] * 4 + [5] * 2
    assert columns["batch_size"].to_pylist() == [4] * 8 + [2] * 2
    with pytest.raises(AssertionError):
        batch_columns(samples[10:11])  # a response of a run in waves without its wave


def test_partial_sync_changes_only_the_named_layer() -> None:
    current, old = tiny_state(0), tiny_state(1)
    merged = mixed(current, old, ("blocks.0.",))
    for name, value in merged.items():
        expected = old[name] if name.startswith("blocks.0.") else current[name]
        assert value is expected, name


def test_weights_served_per_step() -> None:
    ckpts = [{"w": torch.tensor([float(k)])} for k in range(5)]
    train = TrainConfig(warmup_iters=10, iters_per_step=2, n_checkpoints=5)
    states = {it: {"w": torch.tensor([100.0 + it])} for it in kept_iterations(train)}
    w = Weights(train, Trained(ckpts, [], states))
    assert kept_iterations(train) == [11, 13, 15, 17]
    assert WEIGHTS["iter-lag"](w, 2, 4)["w"].item() == 113.0  # iteration 14 - 1
    assert WEIGHTS["ckpt-lag"](w, 2, 4)["w"].item() == 1.0
    jumped = [reload_jump(w, k, 4) for k in range(1, 5)]  # jumps at step 3
    layer = [{"blocks.2.x": s["w"], "w": s["w"]} for s in ckpts]
    w2 = Weights(train, Trained(layer, [], states))
    assert [s["w"].item() for s in jumped] == [1.0, 2.0, 3.0, 4.0]
    assert [reload_jump(w2, k, 4)["blocks.2.x"].item() for k in range(1, 5)] == [1, 2, 2, 2]
    # from step 3 on: the whole model an optimizer step behind, or the lm_head a checkpoint
    lagged = [WEIGHTS["lag-restart"](w, k, 4)["w"].item() for k in range(1, 5)]
    assert lagged == [1.0, 2.0, 115.0, 117.0]  # iterations 16 - 1 and 18 - 1
    head = [{"lm_head.x": s["w"], "w": s["w"]} for s in ckpts]
    w3 = Weights(train, Trained(head, [], states))
    served = [WEIGHTS["head-lag-restart"](w3, k, 4) for k in range(1, 5)]
    assert [s["lm_head.x"].item() for s in served] == [1.0, 2.0, 2.0, 3.0]
    assert [s["w"].item() for s in served] == [1.0, 2.0, 3.0, 4.0]


def test_growth_schedules_rise_with_the_step() -> None:
    rate = [SCHEDULES["splitkv-falling"](EngineConfig(), SHAPE, k, 12) for k in (1, 12)]
    assert [e.kernel.min_kv_for_split for e, _ in rate] == [320, 64]
    assert all(shape == SHAPE for _, shape in rate)
    mix = [SCHEDULES["turns-rising"](EngineConfig(), SHAPE, k, 12) for k in (1, 6, 12)]
    assert [(s.min_turns, s.max_turns) for _, s in mix] == [(1, 1), (3, 3), (5, 5)]
    assert all(engine == EngineConfig() for engine, _ in mix)  # healthy numerics


def test_a_restart_changes_one_setting_from_the_middle_step_on() -> None:
    """``restarted``: the plain engine before the middle step (4 of 6), the changed setting
    from it on: a path's field in the engine's ``NumericPath``, another field on the engine."""
    fp8 = [SCHEDULES["fp8kv-restart"](EngineConfig(), SHAPE, k, 6) for k in (3, 4, 6)]
    assert fp8[0] == (EngineConfig(), SHAPE)
    assert [e.path.kv_cache if e.path else "" for e, _ in fp8] == ["", "e4m3", "e4m3"]
    topp = [SCHEDULES["topp-restart"](EngineConfig(), SHAPE, k, 6)[0] for k in (3, 4)]
    assert [e.top_p for e in topp] == [1.0, 0.9] and topp[1].path is None
    kernel = SCHEDULES["splitkv-restart"](EngineConfig(), SHAPE, 5, 6)[0].kernel
    assert kernel.split_kv and kernel.merge_drops_rowsum


def sample(mask: list[int], stopped: bool = True) -> Sample:
    n = len(mask)
    return Sample(
        uid="step1-p00-r0",
        prompt=[1, 2],
        n_turns=mask.count(1),
        tool_rng=random.Random(0),
        response=list(range(10, 10 + n)),
        mask=mask,
        rollout_lp=[-0.5 if m else 0.0 for m in mask],
        trainer_lp=[-0.25 if m else 0.0 for m in mask],
        stopped=[stopped],
    )


def test_writer_bugs_touch_what_they_claim() -> None:
    mask = [1, 1, 0, 0, 1, 1, 1]
    last = apply_edit("zero-last", [sample(mask)])[0]
    assert last.rollout_lp == [-0.5, -0.5, 0.0, 0.0, -0.5, -0.5, 0.0]
    stops = apply_edit("zero-stop", [sample(mask), sample(mask, stopped=False)])
    assert stops[0].rollout_lp == last.rollout_lp and stops[1].rollout_lp[-1] == -0.5
    ends = apply_edit("zero-turn-ends", [sample(mask)])[0]
    assert ends.rollout_lp == [-0.5, 0.0, 0.0, 0.0, -0.5, -0.5, 0.0]
    shifted = apply_edit("shift-trainer", [sample(mask)])[0]
    assert shifted.trainer_lp == [-0.25, 0.0, 0.0, 0.0, -0.25, -0.25, 0.0]
    fill = apply_edit("sentinel", [sample(mask)])[0]
    assert fill.rollout_lp[4] == -9999.0 and fill.rollout_lp.count(-9999.0) == 1
    padded = apply_edit("pad-as-tokens", [sample(mask), sample([1, 1])])
    assert padded[1].mask == [1] * 7 and padded[1].trainer_lp[2:] == [0.0] * 5
    assert len(apply_edit("duplicate", [sample(mask), sample([1])])) == 4
    original = sample(mask)
    apply_edit("zero-last", [original])
    assert original.rollout_lp[-1] == -0.5  # edits work on copies
    assert set(EDITS) >= {"zero-last", "duplicate"}


def test_stop_appended_only_where_the_engine_did_not_stop() -> None:
    cut, stopped = sample([1, 1], stopped=False), sample([1, 1])
    append_stop([cut, stopped])
    assert cut.response[-1] == NEWLINE and cut.mask[-1] == 1 and cut.rollout_lp[-1] == 0.0
    assert len(stopped.response) == 2


def test_renders_rewrite_the_tool_response() -> None:
    text = b"<python_output>\n42\n</python_output>\n"
    assert RENDERS["strip-newline"](text) == text[:-1]
    assert RENDERS["wrapper"](text) == b"<output>\n42\n</output>\n"
    assert RENDERS["crlf"](text).endswith(b"</python_output>\r\n")
    assert RENDERS["escaped-quotes"](text) == text
    assert RENDERS["escaped-quotes"](b"'ab'\n") == b"&#39;ab&#39;\n"


def test_trainer_temperature_on_one_side_shifts_the_logprobs() -> None:
    samples = rollouts(EngineConfig(dtype=torch.float32))
    state = tiny_state()
    score(TrainerScorer(TINY, state, 0.9), samples)
    same = [lp for s in samples for lp, m in zip(s.trainer_lp, s.mask, strict=True) if m]
    roll = [lp for s in samples for lp, m in zip(s.rollout_lp, s.mask, strict=True) if m]
    assert np.allclose(same, roll, atol=1e-4)
    score(TrainerScorer(TINY, state, 1.0), samples)
    other = [lp for s in samples for lp, m in zip(s.trainer_lp, s.mask, strict=True) if m]
    assert not np.allclose(other, roll, atol=1e-3)


def test_a_bf16_trainer_rounds_every_token_a_little() -> None:
    """``TrainerScorer(dtype=bf16)``: mixed precision's forward, its logits upcast: every token
    moves from the fp32 trainer's logprob, by far less than a temperature's change does."""
    samples = rollouts(EngineConfig(dtype=torch.float32))
    state = tiny_state()
    score(TrainerScorer(TINY, state, 0.9), samples)
    fp32 = np.array([lp for s in samples for lp, m in zip(s.trainer_lp, s.mask, strict=True) if m])
    score(TrainerScorer(TINY, state, 0.9, TRAINER_DTYPES["bf16"]), samples)
    bf16 = np.array([lp for s in samples for lp, m in zip(s.trainer_lp, s.mask, strict=True) if m])
    moved = np.abs(bf16 - fp32)
    assert np.mean(moved > 1e-6) > 0.9 and 0 < moved.max() < 0.1


def test_the_bf16_trainer_runs_repeat_their_originals() -> None:
    """Each run of gen/catalog_trainer.py is a run of the 4-layer model's catalogue (or a
    healthy shape) with only the trainer's dtype, the name, the baseline and the stream
    changed; every baseline is a healthy run with a bf16 trainer too."""
    by_name = {r.name: r for r in CATALOG}
    runs = [r for r in CATALOG if r.trainer_dtype == "bf16"]
    assert len(runs) == len(TRAINER_BF16) >= 30
    assert sum(r.kind == "healthy" for r in runs) >= 10
    for run in runs:
        assert by_name[run.baseline].trainer_dtype == "bf16", run.name
        if run.kind == "healthy":
            continue
        original = by_name[run.name.removesuffix("-bt")]
        assert original.trainer_dtype == "fp32" and run.fault.startswith(original.fault)
        same = replace(run, name=original.name, baseline=original.baseline,
                       trainer_dtype="fp32", fault=original.fault)  # fmt: skip
        assert same == replace(original, stream=""), run.name


def test_the_catalogue_is_consistent() -> None:
    check_catalog()
    assert sum(r.kind == "healthy" for r in CATALOG) >= 20
    for run in CATALOG:
        assert not run.render or run.render in RENDERS, run.name
        assert not run.edit or run.edit in EDITS, run.name
        assert run.weights in WEIGHTS and (not run.schedule or run.schedule in SCHEDULES)


@pytest.mark.parametrize(
    ("suffix", "model", "count"),
    [("wide", "tinylm-wide", 10), ("deep", "tinylm-deep", 18), ("mid", "tinylm-mid", 23)],
)
def test_the_other_models_runs_repeat_their_faults_on_that_model_only(
    suffix: str, model: str, count: int
) -> None:
    """Each `*-wide` / `*-deep` / `*-mid` run is its original with only the model, the baseline
    and the sampling stream changed (gen/catalog_wide.py, gen/catalog_deep.py,
    gen/catalog_mid.py): the same knob on a model of other width and depth, against a healthy
    run of that model (four devices for four)."""
    by_name = {r.name: r for r in CATALOG}
    runs = [r for r in CATALOG if r.name.endswith(f"-{suffix}") and r.kind != "healthy"]
    assert len(runs) == count and {r.kind for r in runs} == {"fault", "combo"}
    for run in runs:
        original = by_name[run.name.removesuffix(f"-{suffix}")]
        base = by_name[run.baseline]
        assert run.model == model == base.model and base.kind == "healthy"
        assert bool(base.replicas) == (original.baseline == "h-gpus"), run.name
        assert original.model == "tinylm" and run.stream == ""
        same = replace(run, name=original.name, model=original.model, baseline=original.baseline)
        assert same == replace(original, stream=""), run.name


@pytest.mark.parametrize(("prefix", "least"), [("h-wide-", 7), ("h-deep-", 10), ("h-mid-", 10)])
def test_the_other_models_healthy_runs_take_the_healthy_shapes(prefix: str, least: int) -> None:
    """A healthy run of another model named after a healthy shape (h-deep-t06, h-wide-gpus) has
    the knobs of the 4-layer model's run of that name (h-t06, h-gpus): only model, loader and
    stream differ; every one names a healthy baseline of its own model."""
    by_name = {r.name: r for r in CATALOG}
    runs = [r for r in CATALOG if r.name.startswith(prefix)]
    assert len(runs) >= least and all(r.kind == "healthy" for r in runs)
    assert len({r.model for r in runs}) == 1
    shaped = 0
    for run in runs:
        namesake = by_name.get("h-" + run.name.removeprefix(prefix).removesuffix("-b"))
        assert by_name[run.baseline].model == run.model
        if namesake is None or namesake.model != "tinylm":
            continue
        shaped += 1
        kept = ("engine", "shape", "replicas", "waves", "max_batch", "weights", "long")
        assert all(getattr(run, k) == getattr(namesake, k) for k in kept), run.name
    assert shaped >= least - 3


def test_a_low_precision_router_flips_some_routes() -> None:
    from gen.moe import MoEConfig, MoELM

    torch.manual_seed(0)
    model = MoELM(MoEConfig(n_layers=1, d_model=32, n_heads=2, d_expert=16, max_len=64)).eval()
    tokens = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        model(tokens)
        plain = model.routes()
        model.blocks[0].router_dtype = torch.float8_e4m3fn
        model(tokens)
        coarse = model.routes()
    flipped = (np.sort(plain, axis=-1) != np.sort(coarse, axis=-1)).any(axis=(2, 3))
    assert 0 < flipped.mean() < 1


def test_vllm_kl_read_back_from_the_dump(tmp_path: Path) -> None:
    from gen.calib_measure import ratio, run_vllm_kl
    from gen.writers import write_parquet_step

    s = sample([1, 1, 0, 1])
    write_parquet_step(tmp_path / "step_0001.parquet", 1, [s], {"source": "calibration"})
    r = np.array([0.25, 0.25, 0.25])  # -0.25 - (-0.5) on the three model tokens
    assert run_vllm_kl(tmp_path) == pytest.approx(np.mean(np.expm1(r) - r), rel=1e-3)
    assert ratio(2e-4, 1e-4) == 2.0 and ratio(None, 1e-4) is None
    s.rollout_lp[0] = -9999.0
    write_parquet_step(tmp_path / "step_0001.parquet", 1, [s], {"source": "calibration"})
    assert run_vllm_kl(tmp_path) is None  # a sentinel: not a finite mean
