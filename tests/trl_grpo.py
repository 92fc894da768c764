"""A tiny real TRL ``GRPOTrainer`` setup on CPU, for the tests that run TRL's own code: the TRL
recipe's training run (tests/dump/test_recipes.py) and the ``trl-vllm-is`` preset against TRL's
importance-sampling correction (tests/stats/presets/test_preset_trl.py)."""

from __future__ import annotations

from typing import Any

import torch


def tiny_grpo_setup() -> tuple[Any, Any, Any]:
    """A 1-layer random Llama, a word-level tokenizer built in memory, and eight prompts."""
    import datasets
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<eos>", "<unk>", *"abcdefghijklmnopqrstuvwxyz"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = transformers.LlamaForCausalLM(config)
    prompts = [" ".join(words[3 + (i + j) % 26] for j in range(2 + i % 3)) for i in range(8)]
    return model, tokenizer, datasets.Dataset.from_dict({"prompt": prompts})


def sample_with_bf16_copy(prompts: list[str], trainer: Any) -> dict:
    """A ``rollout_func``: sampled from a bf16 copy of the policy, with its logprobs."""
    return _sample(engine_copy(trainer).to(torch.bfloat16), prompts, trainer)


def sample_with_stale_copy(prompts: list[str], trainer: Any) -> dict:
    """A ``rollout_func``: sampled from a copy of the policy whose weights are off by a fixed
    seeded noise (an engine a few updates behind), with its logprobs: ratios of a few percent,
    so that importance-sampling bounds near 1 bite."""
    engine = engine_copy(trainer)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for weight in engine.parameters():
            weight.add_(0.03 * torch.randn(weight.shape, generator=gen))
    return _sample(engine, prompts, trainer)


def engine_copy(trainer: Any) -> Any:
    """The inference engine's model: a new instance of the policy's class with its current
    weights. Not ``copy.deepcopy(trainer.model)``: TRL patches the policy's ``forward`` (its
    fused LM head) with a closure over the original model, so a deep copy would still run the
    trainer's own weights and dtype."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    engine = type(model)(model.config)
    engine.load_state_dict(model.state_dict())
    return engine.eval()


def _sample(engine: Any, prompts: list[str], trainer: Any) -> dict:
    gen = torch.Generator().manual_seed(len(prompts))
    out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
    for prompt in prompts:
        ids = trainer.processing_class(prompt)["input_ids"]
        seq, done, lps = list(ids), [], []
        with torch.no_grad():
            for _ in range(trainer.max_completion_length):
                logits = engine(torch.tensor([seq])).logits[0, -1].float()
                logp = torch.log_softmax(logits, -1)
                token = int(torch.multinomial(logp.exp(), 1, generator=gen))
                seq.append(token)
                done.append(token)
                lps.append(float(logp[token]))
                if token == trainer.processing_class.eos_token_id:
                    break
        out["prompt_ids"].append(ids)
        out["completion_ids"].append(done)
        out["logprobs"].append(lps)
    return out
