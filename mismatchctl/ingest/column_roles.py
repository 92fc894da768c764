"""Which column plays which role: the usual names of each producer, and ``--map ROLE=COLUMN``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mismatchctl import schema as S
from mismatchctl.errors import InputError, UsageError

# Sequence layout (one row per response; list columns). First match wins, in this order.
SEQUENCE_NAMES: dict[str, tuple[str, ...]] = {
    S.ROLE_ROLLOUT: (
        "rollout_log_probs",
        "rollout_logprobs",
        "generation_logprobs",
        "sampling_logprobs",
        "inference_logprobs",
        "output_logprobs",
    ),
    S.ROLE_TRAINER: (
        "old_log_probs",
        "trainer_log_probs",
        "trainer_logprobs",
        "prev_logprobs",
        "log_probs",
    ),
    S.ROLE_MASK: ("response_mask", "loss_mask", "loss_masks", "token_loss_mask", "action_mask"),
    S.ROLE_TOKENS: ("responses", "response_ids", "output_tokens", "tokens", "token_ids"),
    S.ROLE_STEP: ("step", "global_step", "rollout_id", "training_step"),
    S.ROLE_SAMPLE_ID: ("sample_id", "uid", "index", "sample_index", "request_id"),
    S.ROLE_GPU: ("gpu", "hardware", "device"),
    S.ROLE_REWARD: ("reward", "rewards", "score", "scores"),
    # a list column (per token, aligned with the logprobs) or one mean per response
    S.ROLE_ENTROPY: ("entropy", "entropys", "entropies", "token_entropy"),
    S.ROLE_WEIGHT_VERSION: ("weight_version", "model_version", "policy_version"),
    # routed experts (MoE): verl's `routed_experts` is the engine's side
    S.ROLE_ROLLOUT_ROUTES: ("rollout_routed_experts", "routed_experts"),
    S.ROLE_TRAINER_ROUTES: ("trainer_routed_experts",),
}

# Token layout (one row per token; scalar columns).
TOKEN_NAMES: dict[str, tuple[str, ...]] = {
    S.ROLE_ROLLOUT: (
        "rollout_logprob",
        "rollout_log_prob",
        "rollout_logprobs",
        "rollout_log_probs",
        "inference_logprob",
        "generation_logprob",
        "sampling_logprob",
    ),
    S.ROLE_TRAINER: (
        "trainer_logprob",
        "trainer_log_prob",
        "old_log_prob",
        "old_log_probs",
        "trainer_logprobs",
        "prev_logprob",
        "log_prob",
    ),
    S.ROLE_MASK: (
        "is_model_token",
        "response_mask",
        "loss_mask",
        "token_loss_mask",
        "action_mask",
        "mask",
    ),
    S.ROLE_TOKENS: ("token_id", "token", "tokens", "token_ids"),
    S.ROLE_STEP: SEQUENCE_NAMES[S.ROLE_STEP],
    S.ROLE_SAMPLE_ID: SEQUENCE_NAMES[S.ROLE_SAMPLE_ID],
    S.ROLE_POSITION: ("position", "pos", "token_index", "token_position"),
    S.ROLE_TURN: ("turn", "turn_index", "turn_idx"),
    S.ROLE_GPU: SEQUENCE_NAMES[S.ROLE_GPU],
    S.ROLE_REWARD: SEQUENCE_NAMES[S.ROLE_REWARD],
    S.ROLE_ENTROPY: SEQUENCE_NAMES[S.ROLE_ENTROPY],  # per token
    S.ROLE_WEIGHT_VERSION: SEQUENCE_NAMES[S.ROLE_WEIGHT_VERSION],
    S.ROLE_ROLLOUT_ROUTES: SEQUENCE_NAMES[S.ROLE_ROLLOUT_ROUTES],  # one [layers][top_k] per row
    S.ROLE_TRAINER_ROUTES: SEQUENCE_NAMES[S.ROLE_TRAINER_ROUTES],
}


def parse_mapping(items: Iterable[str]) -> dict[str, str]:
    """``["rollout=my_col", ...]`` -> ``{"rollout": "my_col"}``, rejecting unknown roles."""
    out: dict[str, str] = {}
    for item in items:
        role, sep, column = item.partition("=")
        role, column = role.strip(), column.strip()
        if not sep or not role or not column:
            raise UsageError(
                f"--map `{item}` is not ROLE=COLUMN",
                "write e.g. --map rollout=my_rollout_col --map trainer=my_trainer_col.",
            )
        if role not in S.ROLES:
            raise UsageError(
                f"--map `{item}`: unknown role `{role}` (known: {', '.join(S.ROLES)})",
                "use one of the known roles on the left of `=`.",
            )
        out[role] = column
    return out


def resolve(
    available: Iterable[str],
    names: Mapping[str, tuple[str, ...]],
    mapping: Mapping[str, str],
    source: str,
) -> dict[str, str]:
    """Role -> column for every role found: ``--map`` first, then the usual names in order."""
    present = list(available)
    found: dict[str, str] = {}
    for role, column in mapping.items():
        if column not in present:
            raise InputError(
                f"column `{column}` (from --map {role}={column}) not found in {source} "
                f"(found: {', '.join(present)})",
                f"name an existing column with --map {role}=<column>.",
            )
        found[role] = column
    taken = set(found.values())
    for role, candidates in names.items():
        if role in found:
            continue
        for name in candidates:
            if name in present and name not in taken:
                found[role] = name
                taken.add(name)
                break
    return found


def require(found: Mapping[str, str], roles: Iterable[str], present: Iterable[str], source: str):
    """Raise the standard 'column not found' error for the first missing required role."""
    for role in roles:
        if role not in found:
            raise InputError(
                f"no {role} logprob column in {source} (found: {', '.join(present)})",
                f"name it with --map {role}=<column>.",
            )


def unique_names(names: list[str], source: str) -> None:
    """Two columns with one name make every role lookup ambiguous: refuse the file."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(
                f"{source} has two columns named `{name}` (expected unique column names)",
                "re-export the dump with distinct column names.",
            )
        seen.add(name)


def refuse_unread_roles(mapping: Mapping[str, str], read: Iterable[str], what: str) -> None:
    """A ``--map ROLE=...`` for a role that a format does not read is an error, not ignored."""
    roles = list(read)
    unused = sorted(set(mapping) - set(roles))
    if unused:
        raise InputError(
            f"--map {unused[0]}=... is not read from {what} (roles read: {', '.join(roles)})",
            "leave that --map out for this file.",
        )
