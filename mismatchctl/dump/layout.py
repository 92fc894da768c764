"""The columns a dump holds: names that ``ingest`` recognises for each role, plus two of its own.

These are the first names of the Parquet sequence layout's role lists
(:data:`mismatchctl.ingest.column_roles.SEQUENCE_NAMES`); a test checks that ``ingest`` maps each role
to exactly these columns.
"""

from __future__ import annotations

from mismatchctl.ingest.column_roles import SEQUENCE_NAMES, TOKEN_NAMES

STEP = "step"  # int64, the step of every row (also the file's `step` metadata key)
SAMPLE_ID = "sample_id"  # string
ROLLOUT = "rollout_log_probs"  # list<float32|float64>: the inference engine's logprobs
TRAINER = "old_log_probs"  # list<float32|float64>: the trainer's logprobs
MASK = "response_mask"  # list<bool>: true on model-generated tokens
TOKENS = "responses"  # list<int32|int64>: token ids
ENTROPY = "entropy"  # list<float32|float64>: per-token entropy (nats)
REWARD = "reward"  # float64
WEIGHT_VERSION = "weight_version"  # int64: the policy version that sampled the response
GPU = "gpu"  # string
# Not read by this version of ingest:
PROMPT_LENGTH = "prompt_length"  # int64: tokens before the row's first listed token
PROMPTS = "prompts"  # list<int32|int64>: the prompt's token ids

PER_TOKEN = (ROLLOUT, TRAINER, MASK, TOKENS, ENTROPY)
WRITTEN = (STEP, SAMPLE_ID, *PER_TOKEN, REWARD, WEIGHT_VERSION, GPU, PROMPT_LENGTH, PROMPTS)

# File metadata: which version of this layout wrote the file (not a simple key: never a run tag).
LAYOUT_KEY = "mismatchctl:dump"
LAYOUT_VERSION = "1"


def reserved() -> frozenset[str]:
    """Names an extra attribute column may not take: every name ``ingest`` reads as a role, in
    either layout, and the columns written anyway."""
    names = {n for group in (SEQUENCE_NAMES, TOKEN_NAMES) for ns in group.values() for n in ns}
    return frozenset(names | set(WRITTEN))
