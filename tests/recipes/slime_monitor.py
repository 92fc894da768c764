"""The slime Monitor recipe of docs/recipes/slime.md: the text between the markers is the
snippet."""

# --8<-- [start:recipe]
from mismatchctl import Monitor


def monitor_mismatch(monitor: Monitor, rollout_id: int, rollout_data: dict) -> dict:
    """slime's rollout data on the actor once compute_log_prob has added the trainer's log_probs:
    one 1-D tensor per sample over its response, as the loss mask. Returns the step's numbers."""
    if "log_probs" not in rollout_data or "rollout_log_probs" not in rollout_data:
        return {}  # not the last pipeline stage, or no recomputed log_probs
    monitor.update(
        rollout_id,
        rollout_data["rollout_log_probs"],  # SGLang's
        rollout_data["log_probs"],  # the actor's
        rollout_data["loss_masks"],
    )
    summary = monitor.step_summary(prefix="mismatch/")
    monitor.flush()
    return summary


# --8<-- [end:recipe]
