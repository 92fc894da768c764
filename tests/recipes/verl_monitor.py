"""The verl Monitor recipe of docs/recipes/verl.md: the text between the markers is the snippet."""

# --8<-- [start:recipe]
from mismatchctl import Monitor


def monitor_mismatch(monitor: Monitor, batch, step: int, metrics: dict) -> list:
    """The step's mismatch of verl's PPO batch (a DataProto), once old_log_probs is in it: its
    numbers into verl's step metrics, the step into the store; returns the step's alerts."""
    tensors = batch.batch
    monitor.update(
        step,
        tensors["rollout_log_probs"],
        tensors["old_log_probs"],
        tensors["response_mask"],  # 0 on tool responses and padding
        token_ids=tensors["responses"],
        sample_ids=[f"{uid}/{row}" for row, uid in enumerate(batch.non_tensor_batch["uid"])],
    )
    metrics.update(monitor.step_summary(prefix="mismatch/"))  # rollout_corr/..., training/...
    return monitor.flush()


# --8<-- [end:recipe]
