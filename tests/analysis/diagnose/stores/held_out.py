"""diagnose on runs of calibration corpora generated anew (tests/data/held_out), which no
threshold was set from when they were found: ``h-deep-t06`` and ``h-deep-t06-b`` (the deep
model trained with seed 13), ``stop-unsampled``, ``cp-batchvar-subtle`` and
``tpl-strip-newline`` (the corpus regenerated on a second machine, seed 0: docs/diagnose.md
"The corpus is a draw of its machine"), and of that corpus ``combo-stale-splitkv-subtle-mid``
over ``h-mid-a`` (their first five steps; with ``combo-topp-stale-mid`` and
``combo-topp-fp8kv-mid``, a truncation beside other weights and beside an fp8 KV cache) and ``pr-fp8kv-wide`` over ``h-wide-a`` (their first
three: "A part is a place only beyond the level of the rest"); ``f-L-pr-fp8kv`` over
``f-L-h-b``, the first eight responses of their first two steps (the family's Llama on
responses of 680 tokens, ``family.py --context 1024 --long-responses --seed 1``: "Long
responses"); ``qw3-sem-temp-loud`` over ``qw3-h-a``, the Qwen3 member's temperature of 0.7 against
1.0 and a healthy run (``family.py --arch qwen3``: "Another family"); ``f-pol-early``, ``f-h-t06`` and ``f-h-b``, their first
three steps (the Llama family of ``sample_data/family.py``, seed 0: docs/diagnose.md "Another
family"); ``m-h-a``, ``m-h-b``, ``m-r3-b``, ``m-router-fp8``, ``m-capture-layers``,
``m-combo-capture-fp8kv``, ``m-replay-late`` and ``m-pol-early``, their first two steps (the
family's Qwen2-MoE, ``family.py --moe``, seed 0: "Another mixture of experts"; routes as verl
lists, read without options); ``pair-temp-gpu`` and ``h-gpus`` whole, ``pair-batchvar-temp``
and ``h-b`` their first three steps (pairs made after every rule, second machine's draw:
"Pairs never calibrated"); ``f-pol-stale`` and ``f-h-a`` whole (the Llama family, seed 0: "A
level that varies from step to step"), and its ``f-cp-splitkv-loud`` whole ("Some steps hot
throughout their responses"), the second machine's ``un-topp-restart``,
``un-fp8kv-restart`` and ``un-fp8kv-splitkv-restart`` whole (top-p, an fp8 KV cache, and a
faulty kernel beside an fp8 cache, from the middle step on: "Faults at some steps"), and the MoE's ``m-pol-stale`` and ``m-h-a6`` (its
``m-h-a``) whole; ``nx-pr-fp8kv`` and ``nx-h-a``, the first three steps of
the GPT-NeoX member's ``f-pr-fp8kv`` and ``f-h-a`` (``family.py --arch gptneox``);
``g1-sem-topp-loud``, ``g1-pol-stale``, ``g1-combo-stale-topp`` and ``g1-h-a`` whole, the
second Gemma2 draw's (``family.py --arch gemma2 --seed 1``); ``bt-h-a``, ``bt-h-b`` and
``bt-pr-fp8kv``, the first three steps of ``h-bt-a``, ``h-bt-b`` and ``pr-fp8kv-bt`` (the
4-layer model scored by a bf16 trainer, gen/catalog_trainer.py: "A trainer in bf16"), and
``mb-h-b``, the MoE's ``m-h-b`` scored by a bf16 trainer (``family.py --moe --trainer bf16``)
whole, its routes left out; ``mb1-h-t06`` and ``mb1-h-b``, the second MoE draw's (``--seed
1``) with a bf16 trainer, whole, routes left out; ``v8-h-t06`` and ``v8-h-b``, the
8192-token Llama's (``family.py --seed 2 --vocab 8192 --trainer bf16``) ``f-h-t06`` and
``f-h-b``, whole; ``nxb-h-t06`` and ``nxb-h-b``, the GPT-NeoX member's with a bf16 trainer,
whole; ``co-h-t06`` and ``co-h-b``, the Cohere member's ``f-h-t06`` and ``f-h-b``
(``family.py --arch cohere``), and its ``f-u-rope-bf16`` and ``f-u-logit-scale-off`` as
``co-u-rope-bf16`` and ``co-u-logit-scale-off`` (``--unseen``), whole; ``co-stop-zero``,
the second Cohere draw's (``--seed 1``) ``f-stop-zero``, whole; ``ut-h-t06``, ``ut-h-b`` and
``ut-sem-temp-subtle``, the ``f-h-t06``, ``f-h-b`` and ``f-sem-temp-subtle`` of a Llama
pre-trained three iterations (``family.py --pretrain 3``: "A barely trained model"), whole;
``mg-h-gpus-s6``, the last step of the MoE's ``m-h-gpus`` made again on the corrected engine
(``family.py --moe``), routes left in; ``co-h-one-turn-s1``, the first step of the Cohere
member's ``f-h-one-turn``; ``sw-gpu-splitdrop-96``, the Llama's ``s-gpu-splitdrop-96`` of
``family.py --sweep`` (one device of four splitting KV a key late past 96 keys), whole;
``c3-h-b-s1``, the first step of ``h-b`` of the calibration corpus drawn on a third machine;
``ol-pair-topp-gpu``, the OLMo 2 member's ``s-pair-topp-gpu`` (``family.py --arch olmo2
--sweep --seed 2``: top-p 0.95 beside one device of four splitting KV a key late), whole;
``co-combo-temp-gpu``, a fresh Cohere draw's ``f-combo-temp-gpu`` (a temperature of 0.97
against 1.0 beside one device of four with an fp8 KV cache), whole; ``g3-gpu-splitdrop-96``,
the Gemma2 member's ``s-gpu-splitdrop-96`` (``family.py --arch gemma2 --sweep --seed 3``: one
device of four splitting KV a key late past 96 keys), whole; ``gr-pair-tpl-gpu``, the Granite
member's ``s-pair-tpl-gpu`` (``family.py --arch granite --sweep --seed 4``: a re-rendered tool
response beside one device of four splitting KV a key late), whole; ``ph-topp-0.995``, the Phi
member's ``s-topp-0.995`` (``family.py --arch phi --sweep --seed 5``: top-p 0.995, 1.03x a
healthy run), whole; ``w90-combo-tpl-splitkv``, the ``f-combo-tpl-splitkv`` of a Llama
pre-trained 90 iterations (``family.py --pretrain 90``: a re-rendered tool tag beside a split-KV
merge a key late, "Leaving the template's tokens out of the ids' test"), and its ``f-pol-lag``
and ``f-h-b`` as ``w90-pol-lag`` and ``w90-h-b``, whole; ``s29-attn-scale-loud`` and ``s29-h-b``,
the calibration corpus' ``un-attn-scale-loud`` and ``h-b`` drawn again (seed 29: "Token ids
that drift"), whole; ``s29-reload-jump``, that draw's ``pol-reload-jump`` (layer 2 left behind
by a reload from step 4: "Token ids that drift within the hot steps"), whole.
Ingested
without tags, as they were diagnosed."""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchctl import api

HELD_OUT = Path(__file__).parents[3] / "data" / "held_out"


def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("held_out") / "store"
    for run in sorted(p for p in HELD_OUT.iterdir() if p.is_dir()):
        api.ingest([run], run.name, store=root)
    return root
