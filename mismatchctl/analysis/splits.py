"""Splits (what a report groups by) and the plan of engine passes that computes them all.

A *split* is a tuple of keys such as ``("run", "turn_kind")``. Keys that are constant within a
sequence (run, gpu, step, tags) can be merged across groups exactly; keys that cut sequences into
segments (turn kind, turn index, probability bin) cannot, because segments are not sequences. So
the engine makes one pass per distinct set of segment keys, at the finest sequence-level keys any
split of that set needs, and every split is then a merge of that pass's groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from mismatchctl.errors import UsageError

RUN, GPU, STEP, TURN_KIND, TURN, BIN = "run", "gpu", "step", "turn_kind", "turn", "bin"
TAG_PREFIX = "tag:"
SEGMENT_KEYS = (TURN_KIND, TURN, BIN)
ORDER = (RUN, GPU, STEP, TURN_KIND, TURN, BIN)

Split = tuple[str, ...]


def is_key(name: str) -> bool:
    return name in ORDER or (name.startswith(TAG_PREFIX) and len(name) > len(TAG_PREFIX))


def canonical(keys: list[str] | tuple[str, ...]) -> Split:
    """Keys in a fixed order (run, gpu, step, tags, turn_kind, turn, bin), without duplicates."""

    def rank(k: str) -> tuple[int, str]:
        if k.startswith(TAG_PREFIX):
            return (ORDER.index(STEP) + 1, k)
        return (ORDER.index(k) + (1 if k in SEGMENT_KEYS else 0), k)

    return tuple(sorted(dict.fromkeys(keys), key=rank))


def parse_by(values: list[str]) -> list[Split]:
    """Each ``--by`` adds one split; commas combine keys (``--by step,turn_kind``)."""
    splits = []
    for value in values:
        keys = [k.strip() for k in value.split(",") if k.strip()]
        bad = [k for k in keys if not is_key(k)]
        if not keys or bad:
            raise UsageError(
                f"--by `{value}`: unknown split key `{(bad or [value])[0]}`",
                "use run, gpu, step, turn_kind, turn, bin or tag:<name>, combined with commas "
                "(e.g. --by step,turn_kind).",
            )
        splits.append(canonical(keys))
    return splits


def default_splits(by_gpu: bool) -> list[Split]:
    """The whole selection and, per run: run, run x turn kind, run x turn, run x bin, run x step."""
    splits: list[Split] = [(), (RUN,), (RUN, TURN_KIND), (RUN, TURN), (RUN, BIN), (RUN, STEP)]
    if by_gpu:
        splits += [(GPU,), (GPU, STEP)]
    return splits


def segment_keys(split: Split) -> tuple[str, ...]:
    return tuple(k for k in split if k in SEGMENT_KEYS)


@dataclass(frozen=True)
class Pass:
    """One engine pass: group tokens by ``keys`` (sequence-level keys + ``segment`` keys)."""

    segment: tuple[str, ...]
    keys: Split

    @property
    def with_hist(self) -> bool:
        return BIN in self.segment


def plan(splits: list[Split]) -> list[Pass]:
    """One pass per set of segment keys, at the union of the splits' sequence-level keys.

    Probability-bin splits share one pass (segment keys: the union of theirs): bin groups carry
    token columns only, which merge exactly over any key, so e.g. ``run x bin`` rolls up from
    ``run x turn_kind x bin``.
    """
    by_segment: dict[tuple[str, ...], list[str]] = {}
    binned = [k for split in splits if BIN in split for k in segment_keys(split)]
    for split in splits:
        seg = segment_keys(split)
        if BIN in seg:
            seg = canonical(binned)
        by_segment.setdefault(seg, [])
        by_segment[seg] += [k for k in split if k not in SEGMENT_KEYS]
    return [Pass(seg, canonical([*keys, *seg])) for seg, keys in by_segment.items()]


def pass_for(split: Split, passes: list[Pass]) -> Pass:
    seg = segment_keys(split)
    if BIN in seg:
        return next(p for p in passes if p.with_hist and set(seg) <= set(p.segment))
    return next(p for p in passes if p.segment == seg)
