"""The second family's generator (sample_data/gen/family_*.py) on a tiny random Llama: each
engine knob does what it claims, and left at its default leaves the plain path as it was."""

from __future__ import annotations

import random

import pytest

from tests.sample_data.family_deps import family_deps

torch = family_deps()

from gen.family_engine import (  # noqa: E402
    EngineKernel,
    Sampler,
    _split_merge,
    decode_turn,
    prepare_engine,
    process,
    score,
)
from gen.family_model import FamilyModel, llama_config, train_tokenizer  # noqa: E402
from gen.family_runs import FAMILY, check_family, trainer_copy, with_trainer  # noqa: E402
from gen.rollout import Sample  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402


def tiny(dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      attn_implementation="sdpa")  # fmt: skip
    return LlamaForCausalLM(cfg).eval().to(dtype)


def exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


def test_the_split_merge_is_exact_unless_its_log_sum_exps_are_rounded() -> None:
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 40, 8), torch.randn(2, 2, 40, 8)
    keep = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    keep[1, ..., :5] = False  # a left-padded row
    want = exact(q, k, v, keep)
    got = _split_merge(q, k, v, keep, 8**-0.5, 16, torch.float32, False)
    assert torch.allclose(got, want, atol=1e-6)
    rounded = _split_merge(q, k, v, keep, 8**-0.5, 16, torch.float8_e4m3fn, False)
    assert not torch.allclose(rounded, want, atol=1e-3)
    dropped = keep.clone()
    dropped[..., 16] = False  # the off-by-one merge never attends to key 16
    late = _split_merge(q, k, v, keep, 8**-0.5, 16, torch.float32, True)
    assert torch.allclose(late, exact(q, k, v, dropped), atol=1e-6)


def test_the_default_engine_kernel_is_transformers_own() -> None:
    plain = tiny()
    engine = prepare_engine(tiny(), EngineKernel(), fp32_head=False, norm_bf16=False)
    ids = torch.randint(0, 64, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, engine(ids).logits)
        fp8 = prepare_engine(tiny(), EngineKernel(fp8_kv=True), False, False)
        assert not torch.equal(plain(ids).logits, fp8(ids).logits)


def test_the_sampler_processes_as_documented() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(process(logits, Sampler(temperature=0.5), [[]]), logits / 0.5)
    kept = process(logits, Sampler(temperature=1.0, top_p=0.8), [[]])
    probs = torch.softmax(logits, -1)[0]
    assert probs[0] < 0.8 <= probs[0] + probs[1]  # the smallest prefix reaching 0.8 keeps two
    assert torch.isfinite(kept[0, :2]).all() and torch.isinf(kept[0, 2:]).all()
    pen = process(logits, Sampler(temperature=1.0, repetition_penalty=2.0), [[0, 3]])
    assert pen[0].tolist() == [1.0, 1.0, 0.0, -2.0]


def test_decode_reports_the_processed_logprob_and_stops() -> None:
    model = tiny()
    sampler = Sampler(temperature=0.7, top_p=0.9)
    gen = torch.Generator().manual_seed(3)
    outs = decode_turn(model, [[1, 2, 3], [4, 5]], sampler, {7}, 12, 2, gen)
    for context, (tokens, lps) in zip([[1, 2, 3], [4, 5]], outs, strict=True):
        assert 2 <= len(tokens) <= 12 and len(lps) == len(tokens)
        assert 7 not in tokens[2:-1]  # a stop token after MIN_NEW ends the turn
        with torch.no_grad():
            logits = model(torch.tensor([context + tokens])).logits[0, len(context) - 1 :]
        for j, (t, lp) in enumerate(zip(tokens, lps, strict=True)):
            want = torch.log_softmax(process(logits[j : j + 1], sampler, [[]]), -1)[0, t]
            assert lp == pytest.approx(float(want), abs=1e-4)


def test_the_trainer_scores_each_sequence_as_alone() -> None:
    model = tiny()
    seqs = [[1, 2, 3, 4, 5], [6, 7, 8]]
    rows = score(model, seqs, temperature=0.8)
    for seq, row in zip(seqs, rows, strict=True):
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([seq])).logits[0] / 0.8, -1)
        assert row[0] == 0.0
        for j in range(1, len(seq)):
            assert row[j] == pytest.approx(float(lp[j - 1, seq[j]]), abs=1e-5)


def test_a_re_rendered_tool_response_is_re_tokenized_for_the_trainer() -> None:
    tok = train_tokenizer()
    fm = FamilyModel(tok, llama_config(), [], [], {}, [])
    tool = tok.encode("<python_output>\n42\n</python_output>\n").ids
    s = Sample(uid="u", prompt=[5, 6], n_turns=2, tool_rng=random.Random(0),
               response=[10, 11, *tool, 12], mask=[1, 1, *[0] * len(tool), 1])  # fmt: skip
    seq, where = trainer_copy(s, fm, "opening-tag")
    assert seq[:4] == [5, 6, 10, 11] and seq[-1] == 12
    assert where[:2] == [2, 3] and where[-1] == len(seq) - 1
    assert all(w == -1 for w in where[2:-1])
    assert seq[4:-1] != tool  # the trainer saw another rendering of the tag


def test_the_catalogue_covers_every_class_healthy_first() -> None:
    check_family()
    classes = {c for r in FAMILY if r.cause for c in r.cause.split("+")}
    assert {"semantics", "policy", "code_path", "precision", "hardware", "template",
            "stop"} <= classes  # fmt: skip
    assert sum(r.kind == "healthy" for r in FAMILY) >= 9
    assert all(r.size in ("subtle", "loud") for r in FAMILY if r.cause)


def test_a_bf16_trainer_turns_the_fp32_head_into_a_precision_fault() -> None:
    """``family.py --trainer bf16``: every run scored by a bf16 trainer, its fault line saying
    so; the engine's fp32 lm_head beside it is no improvement (the sides' heads round
    differently): a precision fault of no set size. The rest keep their kind and cause."""
    runs = {r.name: with_trainer(r, "bf16") for r in FAMILY}
    assert all(r.trainer_dtype == "bf16" and "the trainer in bf16" in r.fault
               for r in runs.values())  # fmt: skip
    head = runs["f-imp-fp32-head"]
    assert (head.kind, head.cause, head.size) == ("fault", "precision", None)
    kept = [r for r in FAMILY if r.name != "f-imp-fp32-head"]
    assert all((runs[r.name].kind, runs[r.name].cause) == (r.kind, r.cause) for r in kept)
    assert with_trainer(FAMILY[0], "fp32") is FAMILY[0]
