"""The one grammar of what a command reads: step ranges and selectors, parsed here for every
command (``report``, ``compare``, ``explain``, ``diagnose``, ``tokens``, ``whatif``, ``check``,
``certify``; ``--baseline`` too), and refused here, with the grammar named, by the commands that
read a whole run (``show``, ``runs show``, ``runs rm``, ``runs check``, ``ingest-metrics``).

v1-a100                      a run
gpu=A100                     every row whose gpu is A100 (gpu is per row)
run=x,engine=vllm-0.18.1     run x, sources tagged engine=vllm-0.18.1
v1-final@steps=0..200        a run, steps 0 to 200 inclusive (``--steps`` syntax: ``-6..-5``,
                             ``150..``, ``..99``, ``42``; ``0-200`` still works for steps >= 0)

Run names hold no ``@``, ``=`` or ``,`` (``store.check_run_name``), so a selector never reads
as a run name, nor a run name as a selector. A tag value or gpu that holds them is written in
double quotes: ``engine="vllm@0.8,fp8"`` (``\"`` and ``\\`` inside the quotes for a quote and a
backslash); ``selector_text`` quotes such a value itself.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from mismatchctl.display import shown
from mismatchctl.engines.plan import StepRange
from mismatchctl.errors import UsageError

_DOTS = re.compile(r"^\s*(-?\d+)?\s*\.\.\s*(-?\d+)?\s*$")  # A..B, A.., ..B; may be negative
_DASH = re.compile(r"^\s*(\d+)\s*-\s*(\d+)?\s*$")  # A-B, A- (the older syntax; steps >= 0)
_ONE = re.compile(r"^\s*(-?\d+)\s*$")
STEPS_SYNTAX = (
    "write A..B (inclusive; steps may be negative, e.g. -6..-5), A.. or ..B, or one step N; "
    "A-B and A- still work for steps >= 0."
)
GRAMMAR = (
    "selectors: RUN[@steps=A..B] or KEY=VALUE[,KEY=VALUE...][@steps=A..B] (keys: run, gpu or "
    "any tag; a value holding @ , = or a quote in double quotes), e.g. v1, 'v1@steps=0..200', "
    "gpu=H20, 'run=v1,engine=vllm@steps=100..', 'engine=\"vllm@0.8\"'."
)
SPECIAL = '@,="\\'  # what a value must be quoted for
STEPS_KEY = "steps"
RUN_KEY, GPU_KEY = "run", "gpu"


def parse_steps(text: str | None) -> StepRange | None:
    """``0..200``, ``150..``, ``..99``, ``-6..-5``, ``42``; and the older ``0-200``, ``150-``.

    A text that the older syntax read differently (``-99`` was "up to 99") is refused, never
    reinterpreted: ``-6`` could be step -6 or steps up to 6."""
    if text is None:
        return None
    lo, hi = _bounds(text)
    if lo is None and hi is None:
        raise UsageError(f"step range `{text}` names no step", STEPS_SYNTAX)
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"step range `{text}` is empty ({lo} > {hi})", "write A..B with A <= B.")
    return StepRange(lo, hi)


def _bounds(text: str) -> tuple[int | None, int | None]:
    for pattern in (_DOTS, _DASH):
        match = pattern.match(text)
        if match:
            lo, hi = (None if g is None else int(g) for g in match.groups())
            return lo, hi
    match = _ONE.match(text)
    if match is None:
        raise UsageError(f"step range `{text}` is not understood", STEPS_SYNTAX)
    step = int(match.group(1))
    if step < 0:
        raise UsageError(
            f"step range `{text}` is ambiguous: step {step}, or steps up to {-step} "
            "(what `-B` meant before steps could be negative)",
            f"write {step}..{step} for step {step} alone, or ..{-step} for steps up to {-step}.",
        )
    return step, step


@dataclass(frozen=True)
class Selector:
    text: str
    run: str | None = None
    gpu: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    steps: StepRange | None = None

    @property
    def whole(self) -> bool:
        """A run and nothing else: no step range, gpu or tag."""
        return self.run is not None and not (self.steps or self.gpu or self.tags)

    @property
    def filters(self) -> tuple[str | None, tuple[tuple[str, str], ...], StepRange | None]:
        """What the selector keeps of its runs (two selectors of one slice have the same)."""
        return self.gpu, tuple(sorted(self.tags.items())), self.steps


def parse_selector(text: str) -> Selector:
    """A selector (the module's grammar); a UsageError naming the grammar and, for a near miss
    (``@step=``, ``@1..3``), the selector meant."""
    base, at, mods = _partition(text)
    steps = _modifiers(mods, text) if at else None
    if "=" not in base:
        if not base.strip():
            raise UsageError(f"selector `{shown(text)}` names no run", GRAMMAR)
        if "," in base:
            runs = ", ".join(f"`{shown(r.strip(), 80)}`" for r in base.split(","))
            raise UsageError(
                f"selector `{shown(text)}` names several runs ({runs}): a selector is one run",
                "give each run as an argument of its own where the command takes several "
                f"(report A B); {GRAMMAR}",
            )
        return Selector(text, run=base.strip(), steps=steps)
    pairs: dict[str, str] = {}
    for item in _split(base, text):
        key, eq, value = item.partition("=")
        key, value = key.strip(), _unquoted(value.strip(), text)
        if not eq or not key or not value:
            raise UsageError(
                f"selector `{shown(text)}`: `{shown(item)}` is not KEY=VALUE",
                _pair_hint(item, eq) + GRAMMAR,
            )
        pairs[key] = value
    run, gpu = pairs.pop(RUN_KEY, None), pairs.pop(GPU_KEY, None)
    return Selector(text, run=run, gpu=gpu, tags=pairs, steps=steps)


def _scan(text: str, whole: str) -> list[tuple[int, str, bool]]:
    """Each character with whether it stands outside double quotes (a backslash in quotes
    escapes the next character); a UsageError for a quote left open."""
    out, inside, escaped = [], False, False
    for i, c in enumerate(text):
        outside = not inside
        if escaped:
            escaped = False
        elif inside and c == "\\":
            escaped = True
        elif c == '"':
            inside = not inside
        out.append((i, c, outside and c != '"'))
    if inside:
        raise UsageError(f"selector `{shown(whole)}` has a quote left open", GRAMMAR)
    return out


def _partition(text: str) -> tuple[str, str, str]:
    """``text.partition("@")`` at the first ``@`` outside quotes."""
    at = next((i for i, c, outside in _scan(text, text) if outside and c == "@"), None)
    return (text, "", "") if at is None else (text[:at], "@", text[at + 1 :])


def _split(base: str, whole: str) -> list[str]:
    """``base.split(",")`` at the commas outside quotes."""
    cuts = [i for i, c, outside in _scan(base, whole) if outside and c == ","]
    return [base[a + 1 : b] for a, b in zip([-1, *cuts], [*cuts, len(base)], strict=True)]


def _unquoted(value: str, whole: str) -> str:
    """A value as written: bare, or in double quotes (``"a@b"``; a backslash there escapes the
    next character); a UsageError for anything else (a quote inside a bare value, text after
    the closing quote)."""
    if '"' not in value:
        return value
    out, i = [], 1
    while value.startswith('"') and i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        elif c == '"':
            if i == len(value) - 1:
                return "".join(out)
            break
        else:
            out.append(c)
            i += 1
    raise UsageError(
        f"selector `{shown(whole)}`: `{shown(value, 80)}` is not one value in double quotes",
        GRAMMAR,
    )


def quoted(value: str) -> str:
    """A value as a selector writes it: in double quotes when it holds ``@ , = "`` or a
    backslash, or has spaces at either end (``parse_selector`` reads it back)."""
    if not any(c in value for c in SPECIAL) and value == value.strip():
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pair_hint(item: str, eq: str) -> str:
    """A run name among KEY=VALUE pairs (``v1,gpu=A100``) is written ``run=v1``."""
    if not eq and item.strip():
        return f"write run={shown(item.strip(), 80)} for a run among KEY=VALUE filters; "
    return ""


def _modifiers(mods: str, text: str) -> StepRange:
    key, eq, value = mods.partition("=")
    if key.strip() == STEPS_KEY and eq:
        try:
            steps = parse_steps(value)
        except UsageError as exc:
            raise UsageError(
                f"selector `{shown(text)}`: {exc.message}", f"{exc.hint[:-1]}; {GRAMMAR}"
            ) from None
        assert steps is not None  # a text always gives a range or an error
        return steps
    meant = _meant(mods)
    base = text.partition("@")[0]
    raise UsageError(
        f"selector `{shown(text)}`: `@{shown(mods)}` is not a step range",
        (f"did you mean `{shown(base)}@steps={meant}`? " if meant else "")
        + f"the only modifier is @steps=A..B; {GRAMMAR}",
    )


def _meant(mods: str) -> str | None:
    """The step range a near miss of ``steps=A..B`` names (``step=1..3``, ``Steps=1..3``,
    ``steps:1..3``, ``1..3``), or None."""
    bare = re.match(r"^\s*([A-Za-z_]*)\s*[=:]?\s*(.*)$", mods)
    if bare is None:
        return None
    word, rest = bare.group(1), bare.group(2)
    if word and not difflib.get_close_matches(word.lower(), [STEPS_KEY], cutoff=0.6):
        return None
    try:
        return str(parse_steps(rest)) if rest.strip() else None
    except UsageError:
        return None


def whole_run(text: str, command: str, hint: str) -> str:
    """The run a command that reads a whole run was given (``show``, ``runs show``, ``runs rm``,
    ``runs check``, ``ingest-metrics``): a run name, or ``run=NAME``; a selector that keeps part
    of a run (a step range, a gpu, a tag) is refused, saying what it keeps, with ``hint``
    (``{run}`` in it: the run the selector names)."""
    if not any(c in text for c in "@=,"):
        return text
    sel = parse_selector(text)
    if sel.run is not None and sel.whole:
        return sel.run
    kept = [f"steps {sel.steps}"] if sel.steps is not None else []
    kept += [f"gpu {sel.gpu}"] if sel.gpu is not None else []
    kept += [f"{k}={v}" for k, v in sel.tags.items()]
    what = "part of a run" if sel.run is not None else "a slice of the store"
    raise UsageError(
        f"{command} takes a whole run, and `{shown(text)}` selects {what} "
        f"({shown(', '.join(kept))})",
        hint.format(run=shown(sel.run or "RUN", 80)),
    )


def selector_text(
    run: str,
    *,
    gpu: str | None = None,
    tags: dict[str, str] | None = None,
    steps: StepRange | None = None,
) -> str:
    """The selector of one run's part of a slice (``parse_selector`` reads it back)."""
    pairs = {**({GPU_KEY: gpu} if gpu is not None else {}), **(tags or {})}
    written = (f"{k}={quoted(v)}" for k, v in pairs.items())
    base = ",".join([f"{RUN_KEY}={run}", *written]) if pairs else run
    return base + (f"@{STEPS_KEY}={steps}" if steps is not None else "")


def combine(
    selectors: list[Selector], steps: StepRange | None = None
) -> tuple[list[str] | None, Selector]:
    """Several selectors read as one slice (``report A B``): their runs (None, every run, when
    one names none) and a selector of the filters they share (no run; its text the selectors
    that filter); ``steps`` (``--steps``) must agree with theirs."""
    filters = {s.filters for s in selectors}
    if len(filters) > 1:
        listed = ", ".join(f"`{shown(s.text)}`" for s in selectors)
        raise UsageError(
            f"the selectors {listed} keep different steps, gpus or tags: a report reads one "
            "slice of its runs",
            "give every run the same @steps=A..B (or --steps A..B for all of them), or compare "
            f"two slices with `mismatchctl compare A B`; {GRAMMAR}",
        )
    gpu, tags, own = next(iter(filters)) if filters else (None, (), None)
    if steps is not None and own is not None and steps != own:
        raise UsageError(
            f"--steps {steps} and the selectors' @steps={own} name different steps",
            "give the step range once: --steps A..B, or @steps=A..B on each run.",
        )
    names = [s.run for s in selectors if s.run is not None]
    runs = list(dict.fromkeys(names)) if names and len(names) == len(selectors) else None
    label = " ".join(s.text for s in selectors if not s.whole)
    return runs, Selector(label, gpu=gpu, tags=dict(tags), steps=steps if own is None else own)
