"""The prime-rl Monitor recipe of docs/recipes/prime-rl.md: the text between the markers is the
snippet."""

# --8<-- [start:recipe]
from mismatchctl import Monitor


def monitor_micro_batch(
    monitor: Monitor, step: int, out: dict, inference_logprobs, mismatch_mask, sequence_lengths
) -> None:
    """One packed micro-batch of prime-rl's trainer: ``[1, seq]`` tensors holding whole
    sequences end to end (``sequence_lengths``); ``mismatch_mask``: the tokens prime-rl takes
    its mismatch_kl over."""

    def rows(t):
        return list(t.detach().squeeze(0).split(sequence_lengths))

    monitor.update(
        step,
        rows(inference_logprobs),
        rows(out["logprobs"]),
        rows(mismatch_mask),
        entropy=rows(out["entropy"]),
    )


# --8<-- [end:recipe]
