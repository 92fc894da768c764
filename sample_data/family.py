"""Generate the second family's corpus: a Llama-architecture model over a BPE vocabulary, its
own engine and trainer (gen/family_*.py), healthy runs and faults, for `confusion.py`.

    python sample_data/family.py --out DIR [--only NAME,NAME] [--seed N] [--vocab V] [--force]
    python sample_data/family.py --out DIR --moe    # the mixture-of-experts member's runs
    python sample_data/family.py --out DIR --arch gemma2    # the Gemma2 member's runs
    python sample_data/family.py --out DIR --arch qwen3     # the Qwen3 member's runs
    python sample_data/family.py --out DIR --arch gptneox   # the GPT-NeoX member's runs
    python sample_data/family.py --out DIR --arch gpt2      # the GPT-2 member's runs
    python sample_data/family.py --out DIR --arch olmo2     # the OLMo 2 member's runs
    python sample_data/family.py --out DIR --arch cohere    # the Cohere member's runs
    python sample_data/family.py --out DIR --arch qwen2     # the Qwen2 member's runs
    python sample_data/family.py --out DIR --arch granite   # the Granite member's runs
    python sample_data/family.py --out DIR --arch phi       # the Phi member's runs
    python sample_data/family.py --out DIR --context 1024 --long-responses   # long responses
    python sample_data/family.py --out DIR --arch qwen3 --trainer bf16   # a bf16 trainer
    python sample_data/family.py --out DIR --arch gemma2 --unseen   # faults never calibrated
    python sample_data/family.py --out DIR --pretrain 90   # a barely trained, flatter model
    python sample_data/family.py --out DIR --sweep   # one knob a class through its range
    python sample_data/family.py --out DIR --restart   # faults from the middle step on
    python sample_data/family.py --out DIR --batch 64x8 --only f-h-a,f-h-b   # bigger steps
    python sample_data/confusion.py --corpus DIR --fresh --write docs/diagnose.md --block family

No threshold of `diagnose` was set on this family: it is a held-out check of other weights, another
architecture, another vocabulary and another engine's decoding; with ``--moe``, of another
mixture of experts (Qwen2-MoE: 16 experts, top-4, a shared expert) and its routes; with
``--arch gemma2``, of a dense model of other numerics (Gemma2: final-logit soft-capping, scaled
embeddings, GeGLU, (1 + w) pre- and post-norms, tied embeddings, sliding-window layers); with
``--arch qwen3``, of one more (Qwen3: RMSNorms on each query and key head, rotary base 1e6, tied
embeddings, no q/k/v biases); with ``--arch gptneox``, of a Pythia-style GPT-NeoX (LayerNorms
with biases, a parallel residual, rotary positions on a quarter of each head, GELU, untied
embeddings); with ``--arch gpt2``, of a GPT-2 (learned absolute positions, no rotary, pre-norm
LayerNorms with biases, GELU, Conv1D projections, tied embeddings); with ``--arch olmo2``, of
an OLMo 2 (RMSNorms after attention and MLP instead of before, one RMSNorm over the whole query
and key projections, rotary base 5e5, untied embeddings); with ``--arch cohere``, of a Cohere
(Command-R: a bias-free LayerNorm before a parallel block, interleaved rotary pairs in fp32, tied
embeddings, the logits scaled by 1/16); with ``--arch qwen2``, of a Qwen2 (Qwen2.5's layout:
biases on the query, key and value projections, rotary base 1e6, tied embeddings); with
``--arch granite``, of a Granite (Granite 3's multipliers: embeddings x12, each block's output
x0.22, attention scores x1/32, logits /8; tied embeddings); with ``--arch phi``, of a Phi
(Phi-2's layout: one LayerNorm before a parallel block, rotary positions on 40% of each head,
biases everywhere, the lm_head's too; untied embeddings); the same runs as the Llama's. Runs go to DIR/runs/NAME/, the trained model to DIR/cache/ (reused), DIR/corpus.json
lists each run as calibrate.py does.

``--context N`` trains the model on windows of N tokens instead of 320 (at most 1024, every
member's position limit) and keeps the runs' rollouts within N instead of 320: the cache file
and the corpus label get a ``-cN`` suffix (``family-seed0-c1024.pt``,
``llama-4x128-bpe1024-c1024``); the iteration counts are the same, the batch is 12 windows
above 320 tokens (16 at 320: 16 windows of 1024 tokens take ~1.5 s an iteration on 2 cores,
~26 minutes in all; 12 take ~0.9 s, ~16 minutes (24 beside another job), and still see 2.4x
the tokens of 16 x 320).
``--pretrain N`` pre-trains the model N iterations before RL step 0 instead of 900 (its RL
steps' checkpoints N/30 iterations apart, at least 2, its early checkpoint at N/3): a barely
trained model, far flatter than any real one that is served (the Llama's loss 1.8 at 900, 4.4
at 90, 6.4 at 3 against ln 1024 = 6.9 for uniform), for a held-out check of `diagnose` on
distributions where the context hardly moves the logits; cache and label get ``-wN``.
``--batch PxG`` gives every run P prompts of G responses a step instead of the catalogue's
(8x4; ``f-h-big`` 16x4): ``64x8`` makes each run 16 times the default's tokens (~3.5 min a
run on 2 cores), for false alarms where the intervals are narrow (a healthy run's own
structure, a prefill's first tokens or the later turns, measured with the power of a real
run's steps); the corpus label is the model's.
``--long-responses`` (needs ``--context 1024`` or more) generates the long-response catalogue
instead (gen/family_runs.py ``LONG_RESPONSES``): healthy runs ``f-L-h-a``, ``f-L-h-b``,
``f-L-h-c`` (temperature 0.6) of 8-12 turns of 64-96 tokens and ``f-L-h-one-turn`` (one turn of
600-700 tokens), ~600-1000 response tokens each where the default runs stay under ~300, with
stale weights (``f-L-pol-stale``) and an fp8 KV cache (``f-L-pr-fp8kv``) for contrast: a
false-alarm check of the checks of `diagnose` whose statistics scale with response length.

``--unseen`` generates, for the dense member ``--arch``, the two healthy baselines ``f-h-a`` and
``f-h-b`` and the member's faults of kinds never calibrated (gen/family_unseen.py ``UNSEEN``,
``f-u-*``): the engine builds another model than the trainer from the same weights, a config
setting read otherwise on its side (a sliding window ignored, a soft-cap skipped, a rotary
scaling, a norm's epsilon, an activation's approximation, a logit scale; gen/family_config_edits.py).

``--sweep`` generates, for the dense member ``--arch``, the two healthy baselines and one knob of
each class turned through its range (gen/family_sweep.py ``SWEEP``, ``s-*``): temperatures, top-p
values, repetition penalties, weights a fraction of an RL step behind, split-KV paths from
several KV lengths, one device's kernel, and pairs of two at sizes the catalogue's pairs lack.

``--restart`` generates, for the dense member ``--arch``, the two healthy baselines and faults
from the middle step on (gen/family_restart.py ``RESTART``, ``f-r-*``): an fp8 KV cache, a
faulty split-KV kernel on nearly every token, weights an optimizer step, an RL step or part of
one behind (docs/diagnose.md "Token ids that drift within the hot steps").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen.calib_measure import corpus_entry, run_fields
from gen.corpus import prompt_line_sources, prompt_lines
from gen.engine import TRAINER_DTYPES
from gen.family_cohere import LABEL as COHERE
from gen.family_gemma2 import LABEL as GEMMA2
from gen.family_gpt2 import LABEL as GPT2
from gen.family_gptneox import LABEL as GPTNEOX
from gen.family_granite import LABEL as GRANITE
from gen.family_model import (
    ARCHS,
    CONTEXT,
    MAX_CONTEXT,
    VOCAB,
    FamilyModel,
    FamilyTraining,
    train_family,
)
from gen.family_moe import DEFAULT, MoEShape
from gen.family_moe_runs import FAMILY_MOE
from gen.family_olmo2 import LABEL as OLMO2
from gen.family_phi import LABEL as PHI
from gen.family_qwen2 import LABEL as QWEN2
from gen.family_qwen3 import LABEL as QWEN3
from gen.family_restart import RESTART
from gen.family_runs import (
    FAMILY,
    LONG_CONTEXT,
    LONG_RESPONSES,
    MODEL,
    STEPS,
    FamilyRun,
    check_family,
    with_trainer,
    write_run,
)
from gen.family_sweep import SWEEP
from gen.family_unseen import UNSEEN, unseen_catalogue

THREADS = 2  # fixed: CPU reductions depend on the thread count
MIN_CONTEXT = 256  # prompts run to 200 tokens
LONG_BATCH = 12  # the training batch above the default context (16 windows at 320)


def context_suffix(context: int) -> str:
    """What a cache file's and a corpus label's name add for a training context: nothing for
    the default's."""
    return "" if context == CONTEXT else f"-c{context}"


PRETRAIN = FamilyTraining().warmup_iters  # the pre-training iterations before RL step 0


def pretrain_suffix(pretrain: int) -> str:
    """What a cache file's and a corpus label's name add for a shorter pre-training: nothing
    for the default's."""
    return "" if pretrain == PRETRAIN else f"-w{pretrain}"


def pretraining(pretrain: int) -> dict[str, int]:
    """The schedule of a model pre-trained ``pretrain`` iterations (the default's: nothing to
    change): its RL steps' checkpoints ``pretrain / 30`` iterations apart (at least 2), its
    early checkpoint at a third of it, so that a barely trained model's stale weights and early
    checkpoint stand as far from its served weights as its training has moved them."""
    if pretrain == PRETRAIN:
        return {}
    return {
        "warmup_iters": pretrain,
        "iters_per_step": max(2, pretrain // 30),
        "early_iter": max(1, pretrain // 3),
    }


def load_model(
    cache: Path,
    seed: int,
    vocab: int,
    moe: MoEShape | None = None,
    arch: str = "llama",
    context: int = CONTEXT,
    pretrain: int = PRETRAIN,
) -> FamilyModel:
    """The trained family model of this seed, vocabulary, training context and pre-training
    (the MoE member of shape ``moe``, else the dense member ``arch``), from DIR/cache/ when it
    is there."""
    from tokenizers import Tokenizer

    kind = (
        ("" if arch == "llama" else f"-{arch}")
        if moe is None
        else "-moe"
        if moe == DEFAULT
        else f"-moe{moe.layers}x{moe.experts}x{moe.top_k}"
    )
    name = f"family{kind}-seed{seed}"
    if vocab != VOCAB:
        name += f"-v{vocab}"
    path = cache / f"{name}{context_suffix(context)}{pretrain_suffix(pretrain)}.pt"
    if path.is_file():
        found = torch.load(path, weights_only=False)
        model = found["model"]
        model.tokenizer = Tokenizer.from_str(found["tokenizer"])
        model.context = context  # a model saved before FamilyModel had it: the default's
        return model
    training = FamilyTraining(
        seed=11 + seed,
        vocab=vocab,
        moe=moe is not None,
        moe_shape=moe or DEFAULT,
        arch=arch,
        **({} if context == CONTEXT else {"context": context, "batch": LONG_BATCH}),
        **pretraining(pretrain),
    )
    model = train_family(training)
    cache.mkdir(parents=True, exist_ok=True)
    tokenizer, model.tokenizer = model.tokenizer, None  # type: ignore[assignment]
    torch.save({"model": model, "tokenizer": tokenizer.to_str()}, path)
    model.tokenizer = tokenizer
    return model


def batch_shape(text: str) -> tuple[int, int]:
    """``--batch PxG``: P prompts of G responses each, both positive."""
    try:
        prompts, group = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: expected PROMPTSxGROUP, e.g. 64x8") from None
    if prompts <= 0 or group <= 0:
        raise argparse.ArgumentTypeError(f"{text}: prompts and group must be positive")
    return prompts, group


def label_of(
    vocab: int,
    moe: MoEShape | None,
    arch: str,
    context: int = CONTEXT,
    pretrain: int = PRETRAIN,
) -> str:
    """The corpus label of the model: its member, its vocabulary, its training context, its
    pre-training."""
    dense = {
        "gemma2": GEMMA2,
        "qwen3": QWEN3,
        "gptneox": GPTNEOX,
        "gpt2": GPT2,
        "olmo2": OLMO2,
        "qwen2": QWEN2,
        "cohere": COHERE,
        "granite": GRANITE,
        "phi": PHI,
    }
    member = (
        f"{moe.label}-bpe{vocab}"
        if moe
        else f"{dense[arch]}-bpe{vocab}"
        if arch in dense
        else MODEL.replace(f"bpe{VOCAB}", f"bpe{vocab}")
    )
    return member + context_suffix(context) + pretrain_suffix(pretrain)


def entry(
    run: FamilyRun, out: Path, seconds: float, label: str = MODEL, moe: MoEShape | None = None
) -> dict[str, object]:
    fields = {**run_fields(run), "model": label, "steps": STEPS}
    if moe is not None:  # what `mismatchctl ingest` needs to read the routes
        fields["ingest"] = {"routes_topk": moe.top_k, "num_experts": moe.experts}
    return corpus_entry(out, fields, round(seconds, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the corpus directory")
    parser.add_argument("--only", default=None, help="comma-separated run names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--vocab", type=int, default=VOCAB, help=f"the BPE vocabulary's size (default {VOCAB})"
    )
    parser.add_argument(
        "--moe", action="store_true", help="the mixture-of-experts member's model and runs"
    )
    parser.add_argument(
        "--moe-shape",
        type=MoEShape.parse,
        default=DEFAULT,
        help="with --moe: LAYERSxEXPERTSxTOPK (default 4x16x4)",
    )
    parser.add_argument(
        "--arch",
        choices=ARCHS,
        default="llama",
        help="the dense member: llama (default), gemma2 (Gemma2ForCausalLM), qwen3 "
        "(Qwen3ForCausalLM), gptneox (GPTNeoXForCausalLM), gpt2 (GPT2LMHeadModel), olmo2 "
        "(Olmo2ForCausalLM), cohere (CohereForCausalLM), qwen2 (Qwen2ForCausalLM), granite "
        "(GraniteForCausalLM) or phi (PhiForCausalLM), each of the "
        "same size and runs",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=CONTEXT,
        help=f"the training context in tokens, also the runs' rollout limit (default {CONTEXT}, "
        f"at most {MAX_CONTEXT}); another trains its own model (cache and label: -cN)",
    )
    parser.add_argument(
        "--pretrain",
        type=int,
        default=PRETRAIN,
        help=f"the pre-training iterations before RL step 0 (default {PRETRAIN}); fewer give a "
        "barely trained, flatter model (cache and label: -wN)",
    )
    parser.add_argument(
        "--batch",
        type=batch_shape,
        default=None,
        metavar="PxG",
        help="every run's prompts x responses a step instead of the catalogue's (8x4): 64x8 "
        "gives 16x the tokens",
    )
    parser.add_argument(
        "--long-responses",
        action="store_true",
        help=f"the long-response runs (f-L-*: responses of ~600-1000 tokens; needs --context "
        f"{LONG_CONTEXT} or more) instead of the family's",
    )
    parser.add_argument(
        "--trainer",
        choices=sorted(TRAINER_DTYPES),
        default="fp32",
        help="the trainer's forward: fp32 (default) or bf16 (mixed precision, the logits upcast); "
        "bf16 labels the corpus -bt",
    )
    parser.add_argument(
        "--unseen",
        action="store_true",
        help="the member's faults of kinds never calibrated (f-u-*) and two healthy baselines "
        "instead of the family's runs",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="one knob of each fault class through its range (s-*) and two healthy baselines "
        "instead of the family's runs",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="faults from the middle step on (f-r-*: a kernel, an fp8 KV cache, weights behind) "
        "and two healthy baselines instead of the family's runs",
    )
    parser.add_argument("--force", action="store_true", help="regenerate runs already present")
    parser.add_argument("--list", action="store_true", help="list the runs and exit")
    args = parser.parse_args(argv)
    if args.moe and args.arch != "llama":
        raise SystemExit(
            f"Error: --moe with --arch {args.arch}: the mixture-of-experts member is a Qwen2-MoE "
            "of its own\nHint: use --moe or --arch, not both"
        )
    if not MIN_CONTEXT <= args.context <= MAX_CONTEXT:
        raise SystemExit(
            f"Error: --context {args.context}: out of range\nHint: {MIN_CONTEXT} (a prompt of "
            f"200 tokens and a turn) to {MAX_CONTEXT} tokens (every member's position limit)"
        )
    if not 1 <= args.pretrain <= PRETRAIN:
        raise SystemExit(
            f"Error: --pretrain {args.pretrain}: out of range\nHint: 1 (a model next to its "
            f"random weights) to {PRETRAIN} iterations (the default)"
        )
    if args.long_responses and (args.moe or args.context < LONG_CONTEXT):
        raise SystemExit(
            "Error: --long-responses: its runs need a dense model trained at --context "
            f"{LONG_CONTEXT} or more\nHint: --context {LONG_CONTEXT} --long-responses, without --moe"
        )
    if args.unseen and (args.moe or args.long_responses or not UNSEEN[args.arch]):
        raise SystemExit(
            f"Error: --unseen: no such runs for {'--moe' if args.moe else args.arch}"
            f"{' with --long-responses' if args.long_responses else ''}\nHint: --unseen with "
            f"--arch {' or '.join(a for a, runs in UNSEEN.items() if runs)}"
        )
    if args.sweep and (args.moe or args.long_responses or args.unseen):
        raise SystemExit(
            "Error: --sweep: its runs are a dense member's at the default response lengths\n"
            "Hint: --sweep with --arch, without --moe, --long-responses or --unseen"
        )
    if args.restart and (args.moe or args.long_responses or args.unseen or args.sweep):
        raise SystemExit(
            "Error: --restart: its runs are a dense member's at the default response lengths\n"
            "Hint: --restart with --arch or --pretrain, without --moe, --long-responses, "
            "--unseen or --sweep"
        )
    catalogue = (
        RESTART
        if args.restart
        else SWEEP
        if args.sweep
        else FAMILY_MOE
        if args.moe
        else LONG_RESPONSES
        if args.long_responses
        else unseen_catalogue(args.arch)
        if args.unseen
        else FAMILY
    )
    check_family(catalogue)
    if args.batch is not None:
        prompts, group = args.batch
        catalogue = tuple(replace(r, prompts=prompts, group=group) for r in catalogue)
    if args.trainer != "fp32":
        catalogue = tuple(with_trainer(r, args.trainer) for r in catalogue)
    runs = list(catalogue)
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {r.name for r in runs}
        if unknown:
            raise SystemExit(
                f"Error: --only: unknown run(s) {', '.join(sorted(unknown))}\n"
                "Hint: --list shows the runs"
            )
        runs = [r for r in runs if r.name in names]
    if args.list:
        for r in runs:
            print(f"{r.name:24} {r.kind:11} {r.cause or '-':18} {r.size or '-':6} {r.fault}")
        return 0
    torch.manual_seed(args.seed)
    torch.set_num_threads(THREADS)
    moe = args.moe_shape if args.moe else None
    model = load_model(
        args.out / "cache", args.seed, args.vocab, moe, args.arch, args.context, args.pretrain
    )
    label = label_of(args.vocab, moe, args.arch, args.context, args.pretrain)
    label += "" if args.trainer == "fp32" else "-bt"
    prompts, sources = prompt_lines(), prompt_line_sources()
    listing = args.out / "corpus.json"
    found = json.loads(listing.read_text())["runs"] if listing.is_file() else []
    items = {r["name"]: r for r in found}
    for run in runs:
        final = args.out / "runs" / run.name
        if final.is_dir() and not args.force and run.name in items:
            continue
        t0 = time.perf_counter()
        scratch = args.out / "runs" / f".{run.name}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        write_run(run, model, prompts, sources, scratch, args.seed)
        shutil.rmtree(final, ignore_errors=True)
        scratch.rename(final)
        items[run.name] = entry(run, args.out, time.perf_counter() - t0, label, moe)
        item = items[run.name]
        against = item["ratio_to_baseline"]
        said = f"{against}x {run.baseline}" if against is not None else "baseline not yet made"
        print(f"{run.name}: vllm_kl {item['vllm_kl']}, {said}", flush=True)
    for name, item in items.items():  # baselines generated after their runs
        run = next(r for r in catalogue if r.name == name)
        item.update(entry(run, args.out, float(item["seconds"]), item["model"], moe))
    order = [r.name for r in catalogue if r.name in items]
    listing.write_text(
        json.dumps(
            {"size": "family", "seed": args.seed, "runs": [items[n] for n in order]}, indent=1
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
