"""The TRL Monitor recipe of docs/recipes/trl.md (torch only: tested without TRL too)."""

# --8<-- [start:recipe]
from mismatchctl import Monitor


def monitor_mismatch(monitor: Monitor, out: dict, step: int) -> dict:
    """One GRPO generation batch (_generate_and_score_completions' output) into the Monitor;
    returns the step's numbers under TRL's names (sampling/...) and mismatchctl's."""
    mask = out["completion_mask"]
    if "tool_mask" in out:
        mask = mask * out["tool_mask"]  # 0 on tool results
    monitor.update(
        step,
        out["sampling_per_token_logps"],  # vLLM's (NaN where vLLM returned none: masked)
        out["old_per_token_logps"],  # the trainer's
        mask,
        token_ids=out["completion_ids"],
    )
    summary = monitor.step_summary(prefix="mismatch/")
    monitor.flush()
    return summary


# --8<-- [end:recipe]
