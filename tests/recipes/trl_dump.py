"""The TRL recipe of docs/recipes/trl.md, first part (torch only: tested without TRL too)."""

# --8<-- [start:recipe]
from mismatchctl.dump import DumpWriter


def dump_mismatch(writer: DumpWriter, out: dict, step: int) -> None:
    """Both logprob sides of one GRPO generation batch (_generate_and_score_completions' output)."""
    missing = [k for k in ("sampling_per_token_logps", "old_per_token_logps") if k not in out]
    if missing:
        raise ValueError(
            f"this GRPO batch has no {' and no '.join(missing)}: generate with vLLM "
            "(use_vllm=True) and keep vllm_importance_sampling_correction=True"
        )
    mask = out["completion_mask"]
    if "tool_mask" in out:
        mask = mask * out["tool_mask"]  # 0 on tool results
    prompt_mask = out["prompt_mask"].bool()  # prompts are left-padded
    writer.add(
        step,
        out["sampling_per_token_logps"],  # vLLM's (NaN where vLLM returned none)
        out["old_per_token_logps"],  # the trainer's
        mask,
        token_ids=out["completion_ids"],
        prompts=[p[m] for p, m in zip(out["prompt_ids"], prompt_mask, strict=True)],
    )
    writer.flush()


# --8<-- [end:recipe]
