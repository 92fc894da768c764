"""One registry of metric names: no other module spells a metric's name, and the tables of
docs/metrics.md are the registry's (``python -m mismatchctl.stats.registry`` prints them)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mismatchctl.stats import registry as M

ROOT = Path(__file__).parents[1]
# Words that are metric names and plain words too (a column of the runs table, a unit of a
# correction): the check skips them.
GENERIC = {"tokens", "sequences", "units", "batches"}
# A framework's own config values or metric keys that happen to be metric names (AReaL's
# ``rejection_sampling.metric``; verl's off-policy metrics ``rollout_corr/<name>``, which its
# preset reports under verl's own keys), allowed in that framework's preset only.
FRAMEWORK_WORDS = {
    "stats/presets/areal.py": {"kl_k1", "kl_k2"},
    "stats/presets/verl.py": {
        "ppl_ratio", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff", "log_ppl_abs_diff",
        "chi2_token", "chi2_seq",
    },
}  # fmt: skip


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            out.add(id(first.value))
    return out


def test_no_module_spells_a_metric_name() -> None:
    names = {m.key for m in M.ALL} - GENERIC
    found = []
    for path in sorted((ROOT / "mismatchctl").rglob("*.py")):
        if path.name == "registry.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        spelled = names - FRAMEWORK_WORDS.get(
            path.relative_to(ROOT / "mismatchctl").as_posix(), set()
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in spelled and id(node) not in skip:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "metric names spelled outside the registry:\n" + "\n".join(found)


def test_docs_tables_are_the_registry() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    for level in M.Level:
        block = re.search(
            rf"<!-- registry:{level} -->\n(.*?)\n<!-- /registry:{level} -->", text, re.S
        )
        assert block, f"docs/metrics.md has no table of the {level} metrics"
        assert block.group(1).strip() == M.markdown_table(level), f"{level} table is stale"


def test_every_metric_has_a_description_and_a_distinct_key() -> None:
    keys = [m.key for m in M.ALL]
    assert len(keys) == len(set(keys))
    assert all(m.description and m.header for m in M.ALL)
