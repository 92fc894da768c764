"""A second model family for the held-out check of `diagnose`: a Llama-architecture model from
`transformers` (RMSNorm, SwiGLU, grouped-query attention, rotary positions) over a BPE
vocabulary trained with `tokenizers`, both made offline from the standard library's source;
or, with ``arch="gemma2"``, a Gemma2 of the same size (gen/family_gemma2.py), with
``arch="qwen3"`` a Qwen3 (gen/family_qwen3.py), with ``arch="gptneox"`` a GPT-NeoX
(gen/family_gptneox.py), with ``arch="gpt2"`` a GPT-2 (gen/family_gpt2.py), with
``arch="olmo2"`` an OLMo 2 (gen/family_olmo2.py), with ``arch="cohere"`` a Cohere
(gen/family_cohere.py), with ``arch="qwen2"`` a Qwen2 (gen/family_qwen2.py), with
``arch="granite"`` a Granite (gen/family_granite.py), with ``arch="phi"`` a Phi
(gen/family_phi.py).

Nothing of it is shared with the sample model (gen/model.py: LayerNorm, GELU, multi-head
attention, a byte vocabulary) but the training text, so its healthy noise, its token
probabilities and its faults' sizes are its own."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    Gemma2Config,
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    PhiConfig,
    PhiForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from gen.corpus import TRAIN_MODULES, read_modules
from gen.family_cohere import cohere_config
from gen.family_gemma2 import gemma2_config, new_gemma2
from gen.family_gpt2 import gpt2_config
from gen.family_gptneox import gptneox_config
from gen.family_granite import granite_config
from gen.family_moe import DEFAULT, MoEShape, moe_config, tap_routers
from gen.family_olmo2 import olmo2_config
from gen.family_phi import phi_config
from gen.family_qwen2 import qwen2_config
from gen.family_qwen3 import qwen3_config
from gen.family_size import MAX_CONTEXT, SIZE
from gen.train import log_iter, lr_at, next_token_loss, optimizer_step, windows

VOCAB = 1024  # the default; family.py --vocab trains another
CONTEXT = 320  # the default training context; family.py --context trains another
ARCHS = (
    "llama",
    "gemma2",
    "qwen3",
    "gptneox",
    "gpt2",
    "olmo2",
    "cohere",
    "qwen2",
    "granite",
    "phi",
)
# the dense members: --arch


@dataclass(frozen=True)
class FamilyTraining:
    warmup_iters: int = 900  # iterations before the first RL step's checkpoint
    iters_per_step: int = 20  # iterations between consecutive RL steps' checkpoints
    n_steps: int = 7  # checkpoints of RL steps 0..n-1
    early_iter: int = 600  # a checkpoint from pre-training: the loud "wrong checkpoint"
    batch: int = 16
    context: int = CONTEXT  # every rollout stays within it (gen/family_runs.py)
    lr: float = 3e-3
    step_lr: float = 5e-4
    seed: int = 11
    vocab: int = VOCAB
    moe: bool = False  # the mixture-of-experts member (gen/family_moe.py)
    moe_shape: MoEShape = DEFAULT
    arch: str = "llama"  # the dense member: one of ARCHS (gen/family_gemma2.py, family_qwen3.py,
    # family_gptneox.py, family_gpt2.py, family_olmo2.py, family_cohere.py, family_qwen2.py,
    # family_granite.py, family_phi.py)


def train_tokenizer(vocab: int = VOCAB) -> Tokenizer:
    """A byte-level BPE of ``vocab`` tokens over the training modules (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [m.decode("utf-8", "replace") for m in read_modules(TRAIN_MODULES)]
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def llama_config(vocab: int = VOCAB) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        **SIZE,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )


@dataclass
class FamilyModel:
    tokenizer: Tokenizer
    config: PretrainedConfig  # a Llama-, Gemma2-, Qwen3-, GPTNeoX-, GPT2-, Olmo2-, Cohere-, Qwen2-, Granite- or PhiConfig
    # or the MoE member's Qwen2MoeConfig
    checkpoints: list[dict[str, torch.Tensor]]  # index = RL step
    lagging: list[dict[str, torch.Tensor]]  # index = RL step: one optimizer step before it
    early: dict[str, torch.Tensor]  # a pre-training checkpoint
    losses: list[float]
    context: int = CONTEXT  # the trained context: no rollout goes past it (gen/family_runs.py)


def new_model(config: PretrainedConfig) -> PreTrainedModel:
    if isinstance(config, Qwen2MoeConfig):
        return Qwen2MoeForCausalLM(config)
    if isinstance(config, Gemma2Config):
        return new_gemma2(config)
    if isinstance(config, Qwen3Config):
        return Qwen3ForCausalLM(config)
    if isinstance(config, Qwen2Config):
        return Qwen2ForCausalLM(config)
    if isinstance(config, GPTNeoXConfig):
        return GPTNeoXForCausalLM(config)
    if isinstance(config, GPT2Config):
        return GPT2LMHeadModel(config)
    if isinstance(config, Olmo2Config):
        return Olmo2ForCausalLM(config)
    if isinstance(config, CohereConfig):
        return CohereForCausalLM(config)
    if isinstance(config, GraniteConfig):
        return GraniteForCausalLM(config)
    if isinstance(config, PhiConfig):
        return PhiForCausalLM(config)
    return LlamaForCausalLM(config)


def build(
    config: PretrainedConfig, state: dict[str, torch.Tensor], dtype: torch.dtype
) -> PreTrainedModel:
    """The model of ``state`` in ``dtype``, its routers tapped if it has experts, its rotary
    frequencies kept in fp32 (``keep_rotary_fp32``) unless the config says
    ``rotary_in_dtype`` (gen/family_config_edits.py ``rope-bf16``)."""
    model = new_model(copy.deepcopy(config))
    model.load_state_dict(state)
    model.eval()
    tables = rotary_tables(model)
    model = model.to(dtype)
    if not getattr(config, "rotary_in_dtype", False):
        keep_rotary_fp32(model, tables)
    tap_routers(model)
    return model


ROTARY_BUFFERS = ("inv_freq", "original_inv_freq")


def rotary_tables(model: PreTrainedModel) -> dict[str, dict[str, torch.Tensor]]:
    """Each rotary embedding's frequency buffers as built (fp32), by module name."""
    return {
        name: {b: getattr(m, b).clone() for b in ROTARY_BUFFERS if hasattr(m, b)}
        for name, m in model.named_modules()
        if hasattr(m, "inv_freq")
    }


def keep_rotary_fp32(model: PreTrainedModel, tables: dict[str, dict[str, torch.Tensor]]) -> None:
    """Put back the fp32 rotary frequencies that ``model.to(bf16)`` rounded: an engine computes
    its rotary angles in fp32 (vLLM's cos/sin cache, SGLang's; only the cos and sin are stored
    in the model's dtype), where a frequency rounded to bf16 puts an error into every angle
    that grows with the distance between query and key (on the Cohere member the mismatch of
    such an engine rose 2x per doubling of the KV position: docs/diagnose.md "Faults never
    calibrated, on other models")."""
    modules = dict(model.named_modules())
    for name, buffers in tables.items():
        for b, table in buffers.items():
            getattr(modules[name], b).data = table


def train_family(cfg: FamilyTraining = FamilyTraining(), log: bool = True) -> FamilyModel:
    tok = train_tokenizer(cfg.vocab)
    text = "\n\n".join(m.decode("utf-8", "replace") for m in read_modules(TRAIN_MODULES))
    data = torch.tensor(tok.encode(text).ids, dtype=torch.long)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    assert cfg.arch in ARCHS and not (cfg.moe and cfg.arch != "llama"), cfg
    assert 0 < cfg.context <= MAX_CONTEXT, cfg
    dense = {
        "llama": llama_config,
        "gemma2": gemma2_config,
        "qwen3": qwen3_config,
        "gptneox": gptneox_config,
        "gpt2": gpt2_config,
        "olmo2": olmo2_config,
        "cohere": cohere_config,
        "qwen2": qwen2_config,
        "granite": granite_config,
        "phi": phi_config,
    }[cfg.arch]
    config = moe_config(cfg.vocab, cfg.moe_shape) if cfg.moe else dense(cfg.vocab)
    model = new_model(config)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    total = cfg.warmup_iters + cfg.iters_per_step * (cfg.n_steps - 1)
    checkpoints: list[dict[str, torch.Tensor]] = []
    lagging: list[dict[str, torch.Tensor]] = []
    early: dict[str, torch.Tensor] = {}
    losses: list[float] = []
    start = time.perf_counter()
    for it in range(total + 1):
        if it == cfg.early_iter:
            early = copy.deepcopy(model.state_dict())
        if it + 1 >= cfg.warmup_iters and (it + 1 - cfg.warmup_iters) % cfg.iters_per_step == 0:
            lagging.append(copy.deepcopy(model.state_dict()))
        if it >= cfg.warmup_iters and (it - cfg.warmup_iters) % cfg.iters_per_step == 0:
            checkpoints.append(copy.deepcopy(model.state_dict()))
        if it == total:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(it, cfg)
        window = windows(data, cfg.context, cfg.batch, gen)
        out = model(window[:, :-1], **({"output_router_logits": True} if cfg.moe else {}))
        loss = next_token_loss(out.logits, window)
        if cfg.moe:  # the load-balancing loss keeps every expert in use
            loss = loss + config.router_aux_loss_coef * out.aux_loss
        losses.append(loss.item())
        optimizer_step(opt, model, loss)
        if log and (it % 100 == 0 or it == total - 1):
            log_iter(it, total, losses[-1], start)
    return FamilyModel(tok, config, checkpoints, lagging, early, losses, cfg.context)
