"""The verl recipe of docs/recipes/verl.md: the text between the markers is the snippet there."""

# --8<-- [start:recipe]
from mismatchctl.dump import DumpWriter


def dump_mismatch(writer: DumpWriter, batch, step: int, entropys=None) -> None:
    """Both logprob sides of verl's PPO batch (a DataProto), once old_log_probs is in it."""
    tensors, extra = batch.batch, batch.non_tensor_batch
    prompts = tensors["prompts"]  # left-padded; attention_mask starts with the prompt's part
    prompt_mask = tensors["attention_mask"][:, : prompts.shape[1]].bool()
    scores = tensors.get("rm_scores", None)
    writer.add(
        step,
        tensors["rollout_log_probs"],
        tensors["old_log_probs"],
        tensors["response_mask"],  # 0 on tool responses and padding
        token_ids=tensors["responses"],
        sample_ids=[f"{uid}/{row}" for row, uid in enumerate(extra["uid"])],
        prompts=[p[m] for p, m in zip(prompts, prompt_mask, strict=True)],
        rewards=None if scores is None else scores.sum(-1),  # verl's sequence score
        entropy=entropys,
        attrs={"data_source": extra["data_source"]} if "data_source" in extra else None,
    )
    writer.flush()  # the step's file is on disk now, not when the next step starts


# --8<-- [end:recipe]
