"""Faults outside the numeric path: the trainer's copy of the conversation, and writer bugs.

`RENDERS` re-render a tool response for the trainer (a chat template applied differently on the
two sides); `append_stop` makes the trainer score a stop byte the engine never sampled; `EDITS`
are bugs of the code that writes the scored samples to the dump (they change what is stored, not
what was computed), applied to copies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from gen.engine import NEWLINE
from gen.rollout import Sample
from gen.runs import crlf_last_newline

SENTINEL = -9999.0  # SkyRL's fill at masked positions


def strip_last_newline(text: bytes) -> bytes:
    """The trainer's template drops the tool response's final newline."""
    return text[:-1] if text.endswith(b"\n") else text


def other_wrapper(text: bytes) -> bytes:
    """The trainer's template wraps tool output in other tags than the engine's."""
    return text.replace(b"<python_output>", b"<output>").replace(b"</python_output>", b"</output>")


def other_opening(text: bytes) -> bytes:
    """Only the opening tag differs (far from the next model turn's first tokens)."""
    return text.replace(b"<python_output>", b"<tool_output>")


def escaped_quotes(text: bytes) -> bytes:
    """The trainer's template escapes the quotes of the tool output as HTML (Jinja's `|e`): only
    the responses whose output holds a quote (a string's repr) differ."""
    return text.replace(b"'", b"&#39;")


RENDERS: dict[str, Callable[[bytes], bytes]] = {
    "crlf": crlf_last_newline,
    "strip-newline": strip_last_newline,
    "wrapper": other_wrapper,
    "opening-tag": other_opening,
    "escaped-quotes": escaped_quotes,
}


def append_stop(samples: list[Sample]) -> None:
    """Responses whose last turn was cut at the length limit get a stop byte appended as a model
    token the engine never sampled (its rollout logprob a 0.0 fill); the trainer scores it."""
    for s in samples:
        if not s.stopped[-1]:
            s.response.append(NEWLINE)
            s.mask.append(1)
            s.rollout_lp.append(0.0)


def turn_starts(mask: list[int]) -> list[int]:
    """Indices of the first token of each model turn."""
    return [i for i, m in enumerate(mask) if m == 1 and (i == 0 or mask[i - 1] == 0)]


def turn_ends(mask: list[int]) -> list[int]:
    """Indices of the last token of each model turn."""
    n = len(mask)
    return [i for i, m in enumerate(mask) if m == 1 and (i == n - 1 or mask[i + 1] == 0)]


def shift_trainer(s: Sample) -> None:
    """The trainer's logprobs written one position early (an off-by-one slice)."""
    shifted = [*s.trainer_lp[1:], 0.0]
    s.trainer_lp = [v if m else 0.0 for v, m in zip(shifted, s.mask, strict=True)]


def sentinel_after_tools(s: Sample) -> None:
    """The rollout value array lags the mask by one at each tool-to-model edge: the first token of
    a later turn holds the -9999 fill of the masked position before it."""
    for i in turn_starts(s.mask)[1:]:
        s.rollout_lp[i] = SENTINEL


def zero_last_token(s: Sample) -> None:
    """The engine's logprob of each response's last token (the stop) reported as 0.0."""
    s.rollout_lp[turn_ends(s.mask)[-1]] = 0.0


def zero_stop(s: Sample) -> None:
    """The engine's logprob of the stop it sampled (a response whose last turn ended at the stop
    byte) reported as 0.0; responses cut at the length limit keep theirs."""
    if s.stopped[-1]:
        s.rollout_lp[turn_ends(s.mask)[-1]] = 0.0


def zero_turn_ends(s: Sample) -> None:
    """The last token of every model turn (each turn's stop) reported as 0.0."""
    for i in turn_ends(s.mask):
        s.rollout_lp[i] = 0.0


def pad_as_tokens(samples: list[Sample]) -> None:
    """Right padding to the step's longest response counted as model tokens (mask 1, 0.0 on
    both sides, token 0)."""
    width = max(len(s.response) for s in samples)
    for s in samples:
        extra = width - len(s.response)
        s.response += [0] * extra
        s.mask += [1] * extra
        s.rollout_lp += [0.0] * extra
        s.trainer_lp += [0.0] * extra


def duplicate_some(samples: list[Sample]) -> list[Sample]:
    """A retried request's result written twice: the step's first group appears twice."""
    group = samples[0].uid.rsplit("-r", 1)[0]
    again = [copy.deepcopy(s) for s in samples if s.uid.rsplit("-r", 1)[0] == group]
    return samples + again


def per_sample(fix: Callable[[Sample], None]) -> Callable[[list[Sample]], list[Sample]]:
    def edit(samples: list[Sample]) -> list[Sample]:
        for s in samples:
            fix(s)
        return samples

    return edit


def in_place(fix: Callable[[list[Sample]], None]) -> Callable[[list[Sample]], list[Sample]]:
    def edit(samples: list[Sample]) -> list[Sample]:
        fix(samples)
        return samples

    return edit


EDITS: dict[str, Callable[[list[Sample]], list[Sample]]] = {
    "shift-trainer": per_sample(shift_trainer),
    "sentinel": per_sample(sentinel_after_tools),
    "zero-last": per_sample(zero_last_token),
    "zero-stop": per_sample(zero_stop),
    "zero-turn-ends": per_sample(zero_turn_ends),
    "pad-as-tokens": in_place(pad_as_tokens),
    "duplicate": duplicate_some,
}


def apply_edit(name: str, samples: list[Sample]) -> list[Sample]:
    """The writer bug `name` on deep copies of the samples."""
    return EDITS[name]([copy.deepcopy(s) for s in samples])
