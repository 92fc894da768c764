"""Training curves from TensorBoard event files: a log directory (event files possibly in
sub-directories such as ``train/`` and ``eval/``) or a single event file.

Read with TensorBoard's own ``EventAccumulator`` (imported lazily: the ``tensorboard`` extra), one
accumulator per event file so that a file that cannot be read is named. Taken: simple scalars
(torch's ``add_scalar``, TF1 summaries) and 0-d tensors of the scalars plugin (TF2,
``tensorboard.summary.Writer``, torch's ``add_scalar(new_style=True)``); every other tag
(histograms, images, audio, text, other tensors) is a non-scalar tag, excluded and noted.

Orphaned-data purging is off: every event in the files is read, and a step logged twice (a
resumed run) keeps its last value in file order, as in the other formats. The files of one
directory are read in name order (TensorBoard's order; the names start with the creation time).
When event files sit in several directories, each tag is prefixed with its directory relative
to the log directory (``train/loss``). A file whose reading stops at a damaged or truncated
record (TensorBoard skips the rest silently) is noted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mismatchctl.curves.names import (
    DAMAGED_EVENT_FILE,
    EMPTY_EVENT_FILE,
    NON_SCALAR,
    Found,
    NonNumeric,
    Values,
    cannot_open,
    clean_name,
    listing,
    unreadable,
)
from mismatchctl.display import file_label
from mismatchctl.errors import InputError, MissingDependencyError

STEP_COLUMN = "(tensorboard step)"
EVENT_FILE_MARK = "tfevents"
INSTALL_HINT = "pip install 'mismatchctl[tensorboard]'"
SCALARS_PLUGIN = "scalars"
_TRUNCATED = "Truncated record"  # start of TensorBoard's debug message for a damaged record


def load_tensorboard() -> tuple[ModuleType, ModuleType]:
    """``(event_accumulator, tensor_util)``; MissingDependencyError without tensorboard."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.util import tensor_util
    except ImportError:
        raise MissingDependencyError(
            "reading TensorBoard event files needs the `tensorboard` package", INSTALL_HINT
        ) from None
    return event_accumulator, tensor_util


def read_tensorboard_metrics(path: Path) -> Found:
    """Read the event files at ``path``; see the module docstring."""
    ea, tensor_util = load_tensorboard()
    groups = _event_files(path)
    found = Found(STEP_COLUMN, {})
    if len(groups) > 1:
        shown = [prefix or "(none: the log directory itself)" for prefix in groups]
        found.notes.append(
            f"event files in {len(groups)} directories: each tag is prefixed with its directory "
            f"({listing(shown)})"
        )
    parts: dict[str, list[Values | NonNumeric]] = {}
    origin: dict[str, str] = {}
    for prefix, files in groups.items():
        for file in files:
            label = file_label(file)
            acc = _load(file, label, ea, found)
            for tag, item in _tags(acc, ea, tensor_util) if acc is not None else ():
                name = clean_name(prefix + tag, f"{label}: tag")
                _check_origin(origin, name, prefix, path)
                parts.setdefault(name, []).append(item)
    found.columns = {name: _merge(items) for name, items in parts.items()}
    return found


def _event_files(path: Path) -> dict[str, list[Path]]:
    """Tag prefix -> event files in name order (a prefix only with several directories)."""
    if path.is_file():
        return {"": [path]}
    files = sorted(p for p in path.rglob(f"*{EVENT_FILE_MARK}*") if p.is_file())
    if not files:
        raise InputError(
            f"no TensorBoard event files (names containing `{EVENT_FILE_MARK}`) in "
            f"{file_label(path)} or below",
            "point at the log directory a SummaryWriter wrote, or pass --format csv|jsonl.",
        )
    by_dir: dict[Path, list[Path]] = {}
    for file in files:
        by_dir.setdefault(file.parent, []).append(file)
    if len(by_dir) == 1:
        return {"": files}
    return {_prefix(d, path): by_dir[d] for d in sorted(by_dir)}


def _prefix(directory: Path, root: Path) -> str:
    relative = directory.relative_to(root).as_posix()
    return "" if relative == "." else relative + "/"


def _load(file: Path, label: str, ea: ModuleType, found: Found) -> Any | None:
    """The accumulator of one event file, None for an empty file (noted)."""
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise cannot_open(file, exc) from None
    if size == 0:
        found.excluded[EMPTY_EVENT_FILE] += 1
        found.notes.append(f"skipped the empty event file {label} (a writer that never flushed)")
        return None
    guidance = {ea.SCALARS: 0, ea.TENSORS: 0, ea.HISTOGRAMS: 1, ea.IMAGES: 1, ea.AUDIO: 1}
    acc = ea.EventAccumulator(str(file), size_guidance=guidance, purge_orphaned_data=False)
    with _damage_watch() as damaged:
        try:
            acc.Reload()
        except Exception as exc:
            raise unreadable(file, "TensorBoard events", exc) from None
    try:
        acc.FirstEventTimestamp()
    except ValueError:
        raise InputError(
            f"{label}: no TensorBoard event could be read from it (not an event file, or "
            "damaged from its first record)",
            "remove it from the log directory, or point at the good event files.",
        ) from None
    if damaged:
        found.excluded[DAMAGED_EVENT_FILE] += 1
        found.notes.append(
            f"{label}: reading stopped at a damaged or truncated record; the events after it in "
            "that file, if any, are not read (a writer killed mid-write leaves a truncated record)"
        )
    return acc


@contextmanager
def _damage_watch() -> Iterator[list[str]]:
    """Collect TensorBoard's debug-level "Truncated record" messages while reading (it skips
    the rest of a file at a damaged record without raising). Records below the level that was
    in effect before are caught here and not passed on."""
    logger = logging.getLogger("tensorboard")
    level, caught = logger.level, []
    effective = logger.getEffectiveLevel()

    def keep(record: logging.LogRecord) -> bool:
        if record.getMessage().startswith(_TRUNCATED):
            caught.append(record.getMessage())
        return record.levelno >= effective

    logger.addFilter(keep)
    logger.setLevel(logging.DEBUG)
    try:
        yield caught
    finally:
        logger.setLevel(level)
        logger.removeFilter(keep)


def _tags(acc: Any, ea: ModuleType, tensor_util: ModuleType) -> Iterator[tuple[str, Any]]:
    """(tag, Values | NonNumeric) for every tag of one accumulator."""
    tags = acc.Tags()
    for tag in tags[ea.SCALARS]:
        events = acc.Scalars(tag)
        steps = np.array([e.step for e in events], dtype=np.int64)
        yield tag, Values(steps, np.array([e.value for e in events], dtype=np.float64))
    for tag in tags[ea.TENSORS]:
        yield tag, _tensor_values(acc, tag, tensor_util)
    for kind, what in ((ea.HISTOGRAMS, "histogram"), (ea.IMAGES, "image"), (ea.AUDIO, "audio")):
        for tag in tags[kind]:
            yield tag, NonNumeric(NON_SCALAR, what)


def _tensor_values(acc: Any, tag: str, tensor_util: ModuleType) -> Values | NonNumeric:
    plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
    if plugin != SCALARS_PLUGIN:
        return NonNumeric(NON_SCALAR, f"{plugin or 'plain'} tensor")
    events = acc.Tensors(tag)
    values = np.empty(len(events), dtype=np.float64)
    for i, event in enumerate(events):
        try:
            array = tensor_util.make_ndarray(event.tensor_proto)
        except Exception:  # a dtype numpy does not know
            return NonNumeric(NON_SCALAR, "scalars-plugin tensor of an unknown type")
        if array.ndim != 0 or array.dtype.kind not in "iuf":
            return NonNumeric(NON_SCALAR, f"scalars-plugin tensor of shape {list(array.shape)}")
        values[i] = float(array)
    return Values(np.array([e.step for e in events], dtype=np.int64), values)


def _check_origin(origin: dict[str, str], name: str, prefix: str, root: Path) -> None:
    first = origin.setdefault(name, prefix)
    if first != prefix:
        where = [
            f"`{p.rstrip('/')}/`" if p else "the log directory itself" for p in (first, prefix)
        ]
        raise InputError(
            f"{file_label(root)}: the tag `{name}` comes from both {where[0]} and {where[1]}",
            "read the sub-directories one at a time.",
        )


def _merge(items: list[Values | NonNumeric]) -> Values | NonNumeric:
    """One tag over several files (in file order); non-scalar anywhere makes it non-scalar."""
    for item in items:
        if isinstance(item, NonNumeric):
            return item
    numeric = [i for i in items if isinstance(i, Values)]
    return Values(
        np.concatenate([v.steps for v in numeric]), np.concatenate([v.values for v in numeric])
    )
