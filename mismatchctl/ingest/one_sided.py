"""Files that frameworks write with one logprob side or none: recognised, and refused with what
they hold and what is missing (see docs/frameworks.md).

- TRL ``GRPOTrainer(log_completions=True)`` writes ``<output_dir>/completions/
  completions_<step>.parquet``: ``step``, ``prompt``, ``completion``, one column per reward
  function, the ``log_extra`` columns and ``advantage``. No per-token logprobs: TRL keeps vLLM's
  ``sampling_per_token_logps`` and the trainer's ``old_per_token_logps`` in memory only.
- prime-rl's inference workers (before its orchestrator, up to mid-2025) wrote Parquet with
  ``input_tokens``, ``output_tokens``, ``input_logprobs`` (zeros), ``output_logprobs`` (the
  sampler's): the inference side only. Its trainer's token exports hold both sides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mismatchctl import schema as S
from mismatchctl.errors import InputError
from mismatchctl.ingest.column_roles import SEQUENCE_NAMES, TOKEN_NAMES

TRL_COLUMNS = ("step", "prompt", "completion", "advantage")
PRIME_COLUMNS = ("input_tokens", "output_tokens", "output_logprobs")
_DOC = "docs/frameworks.md"


def _has(names: Sequence[str], role: str, mapping: Mapping[str, str]) -> bool:
    """Whether a column of ``role`` is mapped or present under a usual name."""
    usual = (*SEQUENCE_NAMES.get(role, ()), *TOKEN_NAMES.get(role, ()))
    return role in mapping or any(name in names for name in usual)


def refuse_one_sided(path: Path, names: Sequence[str], mapping: Mapping[str, str]) -> None:
    """Raise for a Parquet file known to hold one logprob side or none, unless the user maps
    the missing side."""
    if all(c in names for c in TRL_COLUMNS) and not _has(names, S.ROLE_ROLLOUT, mapping):
        rewards = [n for n in names if n not in TRL_COLUMNS]
        raise InputError(
            f"{path} is a TRL GRPOTrainer completions table (log_completions: step, prompt, "
            f"completion, advantage; other columns: {', '.join(rewards) or 'none'}): it holds "
            "texts, rewards and advantages, and no per-token logprobs of either side",
            "TRL keeps vLLM's sampling_per_token_logps and the trainer's old_per_token_logps "
            "in memory only; save them per step with completion_mask as one row per "
            f"completion, then ingest that file ({_DOC}, TRL).",
        )
    prime = all(c in names for c in PRIME_COLUMNS)
    if prime and not _has(names, S.ROLE_TRAINER, mapping):
        found = [n for n in names if "logprob" in n]
        raise InputError(
            f"{path} is a prime-rl inference Parquet: it holds only the inference side "
            f"({', '.join(found)}; input_logprobs are zeros for the prompt), no trainer "
            "logprobs",
            "prime-rl's trainer writes both sides with enable_token_export = true "
            "(token_exports/step_<N>/rank_<R>.jsonl, read as prime-jsonl); if this file has "
            "the trainer's logprobs in another column, name it with --map trainer=<column> "
            f"({_DOC}, prime-rl).",
        )
