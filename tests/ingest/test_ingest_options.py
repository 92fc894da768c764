"""The reading options of `ingest` and `watch` are one object, ``IngestOptions``: declared once
for both commands (``cli/reading.py``), taken whole by ``api.ingest`` and ``api.watch``
(``options=``) and, as before, one keyword each (those replace the object's fields)."""

from __future__ import annotations

import inspect
from dataclasses import fields
from importlib import import_module
from pathlib import Path

import polars as pl
import pytest
import typer

from mismatchctl import api
from mismatchctl.cli import reading
from mismatchctl.cli.main import app
from mismatchctl.errors import UsageError
from mismatchctl.options import IngestOptions
from tests.helpers import FIXTURES, cli

TOOLS = FIXTURES / "verl_tools_step_5.parquet"  # masked tool responses between model turns


def _rows(store: Path, run: str, kind: str) -> pl.DataFrame:
    return api.open_store(store).scan(run, kind=kind).collect().drop("run", strict=False)


def test_every_reading_option_is_declared_once_for_both_commands() -> None:
    assert list(reading.READING) == [f.name for f in fields(IngestOptions)]
    group: typer.core.TyperGroup = typer.main.get_command(app)  # type: ignore[assignment]
    commands = {c.name: c for c in group.commands.values()}
    declared = {}
    for name in ("ingest", "watch"):
        params = {p.name: p for p in commands[name].params}
        assert set(reading.READING) <= set(params), name
        declared[name] = [
            (params[o].opts, params[o].secondary_opts, params[o].help, params[o].default)
            for o in reading.READING
        ]
        command = getattr(import_module(f"mismatchctl.cli.{name}"), name)
        own = inspect.signature(command).parameters
        assert "reading" not in own and set(reading.READING) <= set(own)  # one for twelve
    assert declared["ingest"] == declared["watch"]
    assert tuple(declared["ingest"][0][0]) == ("--tag", "-t")


def test_options_object_and_the_keywords_ingest_the_same(store: Path) -> None:
    kw = api.ingest([TOOLS], "kw", store=store, tags=["gpu=H20"], keep_masked=False)
    whole = IngestOptions(tags={"gpu": "H20"}, keep_masked=False)
    obj = api.ingest([TOOLS], "obj", store=store, options=whole)
    assert kw.tally.model_tokens == obj.tally.model_tokens > 0
    for run in ("kw", "obj"):
        info = api.run_info(run, store)
        assert info.tags == {"gpu": "H20"}
        assert api.open_store(store).parts(run, "masked") == []  # keep_masked=False, both ways
    for kind in ("tokens", "sequences"):
        assert _rows(store, "kw", kind).equals(_rows(store, "obj", kind)), kind
    kept = api.ingest([TOOLS], "kept", store=store, options=IngestOptions())
    assert kept.tally.model_tokens == kw.tally.model_tokens
    assert api.open_store(store).parts("kept", "masked") != []  # the default keeps them


def test_a_keyword_replaces_that_field_of_the_options(store: Path) -> None:
    base = IngestOptions(tags=("gpu=A100", "engine=vllm"), keep_masked=False)
    api.ingest([TOOLS], "r", store=store, options=base, tags={"gpu": "H20"})
    assert api.run_info("r", store).tags == {"gpu": "H20"}  # tags replaced whole
    assert api.open_store(store).parts("r", "masked") == []  # keep_masked still the object's


def test_routes_keyword_and_route_fields_reach_the_same_check(store: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--routes-aligned 'sideways'"):
        api.ingest([TOOLS], "r", store=store, routes=api.RouteOptions(aligned="sideways"))
    with pytest.raises(UsageError, match="--routes-aligned 'sideways'"):
        api.ingest([TOOLS], "r", store=store, options=IngestOptions(routes_aligned="sideways"))
    with pytest.raises(UsageError, match="--routes-topk -1: expected a positive count"):
        api.watch(tmp_path, "w", store=store, options=IngestOptions(routes_topk=-1))
    with pytest.raises(UsageError, match="--num-experts 0"):
        api.watch(tmp_path, "w", store=store, routes=api.RouteOptions(num_experts=0))
    assert api.runs(store) == []


def test_an_unknown_reading_keyword_is_a_type_error(store: Path, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="ingest\\(\\) got an unexpected keyword argument 'tag'"):
        api.ingest([TOOLS], "r", store=store, tag=["gpu=H20"])
    with pytest.raises(TypeError, match="watch\\(\\) got an unexpected keyword argument 'map'"):
        api.watch(tmp_path, "w", store=store, map=["rollout=x"])


def test_the_commands_hand_their_options_to_the_api(store: Path, tmp_path: Path) -> None:
    ran = cli("ingest", str(TOOLS), "--run", "c", "-q", "--tag", "gpu=H20", "--no-keep-masked")
    assert ran.code == 0, ran.err
    assert api.run_info("c", store).tags == {"gpu": "H20"}
    assert api.open_store(store).parts("c", "masked") == []
    bad = cli("watch", str(tmp_path), "--run", "w", "--once", "--routes-topk", "-2")
    assert bad.code == 1 and "Error: --routes-topk -2" in bad.err and "Hint:" in bad.err
