"""The OpenRLHF recipe of docs/recipes/openrlhf.md: the text between the markers is the snippet."""

# --8<-- [start:recipe]
from mismatchctl.dump import DumpWriter


def dump_mismatch(writer: DumpWriter, experiences, step: int) -> None:
    """Both logprob sides of OpenRLHF's experiences (make_experience_batch's output)."""
    for exp in experiences:  # micro-batches: rows over prompt + response, shifted by one
        mask = exp.action_mask.bool()  # position j scores token sequences[:, j + 1]
        start = mask.int().argmax(dim=1)  # the first model token: rows start there
        rows = range(len(mask))
        writer.add(
            step,
            [exp.rollout_log_probs[i, start[i] :] for i in rows],  # vLLM's
            [exp.action_log_probs[i, start[i] :] for i in rows],  # the actor's
            [mask[i, start[i] :] for i in rows],
            token_ids=[exp.sequences[i, start[i] + 1 :] for i in rows],
            prompt_lengths=start + 1,
            sample_ids=exp.index,
            rewards=exp.rewards,
        )
    writer.flush()  # one file per step, on disk now


# --8<-- [end:recipe]
