"""Imports point one way: cli -> api -> analysis (curves beside it) -> engines -> store -> stats.

Every module of the package is parsed (not imported) and each of its imports of another part of
the package is checked against the layer order below: a module may import its own package and the
layers below its own, never one above. ``render`` writes results: it reads result types (analysis,
curves, and what the api returns) and the metric registry, and computes nothing.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "mismatchctl"

# Higher layers may import lower ones. Names are the first component under mismatchctl.
LAYERS: list[set[str]] = [
    {"schema", "errors", "display", "options", "version", "lazy"},
    {"allocator", "parallel", "columns"},
    {"stats"},
    {"store"},
    {"engines", "ingest", "bisect"},
    {"curves"},
    {"analysis", "dump", "sample_runs"},
    {"api", "monitor"},
    {"render"},
    {"cli"},
    {"__main__"},
]
# What render may read: results (analysis, curves, what the api returns), and of stats only the
# registry of metric names and formats and the densities' grids (the data figures draw).
RENDER_MAY_IMPORT = {"analysis", "curves", "api", "schema", "errors", "display", "version"}
RENDER_MAY_IMPORT_STATS = {"mismatchctl.stats.registry", "mismatchctl.stats.density"}
# The command line calls the api and writes its results: nothing else of the package.
CLI_MAY_IMPORT = {"api", "render", "errors", "display", "version"}


def _layer(name: str) -> int:
    for i, names in enumerate(LAYERS):
        if name in names:
            return i
    raise AssertionError(f"mismatchctl.{name} is in no layer of tests/test_layers.py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of the package in a file (``from mismatchctl import x``
    counts as an import of ``mismatchctl.x``)."""
    out = []
    for node in _import_nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mismatchctl":
                out += [(node.lineno, f"mismatchctl.{a.name}") for a in node.names]
            elif node.module.startswith("mismatchctl."):
                for a in node.names:  # `from mismatchctl.stats import registry`: the submodule
                    sub = f"{node.module}.{a.name}"
                    is_module = (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").exists()
                    out.append((node.lineno, sub if is_module else node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("mismatchctl.")]
    return out


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0] if len(rel.parts) > 1 or rel.parts[0] != "__init__" else "__init__"


def test_imports_point_one_way() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = _part(path)
        if part == "__init__":  # the package's public surface re-exports the api
            continue
        for line, module in _imports(path):
            target = module.split(".")[1]
            if target == part:
                continue
            if part == "render":
                ok = target in RENDER_MAY_IMPORT or module in RENDER_MAY_IMPORT_STATS
            elif part == "cli":
                ok = target in CLI_MAY_IMPORT
            else:
                ok = _layer(target) < _layer(part)
            if not ok:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {_part(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    for part in parts:
        _layer(part)


DIAGNOSE = "mismatchctl.analysis.diagnose"


def test_the_report_does_not_know_diagnose() -> None:
    """The report is a result of its own: a diagnosis of each run is composed with it beside it
    (``analysis/diagnosed_report.py``), so no module of the report (``analysis/report/``)
    imports diagnose, not even for a type."""
    reports = sorted((PACKAGE / "analysis" / "report").glob("*.py"))
    assert {p.name for p in reports} >= {"report.py", "view.py"}
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in reports
        for line, module in _imports(path)
        if module == DIAGNOSE or module.startswith(f"{DIAGNOSE}.")
    ]
    assert not wrong, "\n".join(wrong)


# Where the package's modules are imported: the package, its tests, the benchmarks, the data tools.
IMPORTERS = ("mismatchctl", "tests", "bench", "sample_data")


@functools.cache
def _import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a file, parsed once for every test of this module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


@functools.cache
def _is_module(dotted: str) -> bool:
    path = ROOT / dotted.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _module_names(path: Path) -> list[tuple[str, str, bool]]:
    """(module, the name it is bound to, whether that name is an alias) of every import of a
    module of the package in a file (imports of names from a module are not counted)."""
    out = []
    for node in _import_nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "mismatchctl":
                for a in node.names:
                    if _is_module(sub := f"{node.module}.{a.name}"):
                        out.append((sub, a.asname or a.name, a.asname is not None))
        elif isinstance(node, ast.Import):
            out += [(a.name, a.asname, True) for a in node.names if a.asname and _is_module(a.name)]
    return out


def test_one_name_per_module() -> None:
    """A module of the package is bound to one name wherever it is imported (``schema`` is ``S``
    everywhere), and an alias names one module only (docs/architecture.md "Names")."""
    names: dict[str, set[str]] = {}
    aliases: dict[str, set[str]] = {}
    for top in IMPORTERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            for module, name, alias in _module_names(path):
                names.setdefault(module, set()).add(name)
                if alias:
                    aliases.setdefault(name, set()).add(module)
    many = {m: sorted(n) for m, n in names.items() if len(n) > 1}
    assert not many, f"modules imported under more than one name: {many}"
    shared = {a: sorted(m) for a, m in aliases.items() if len(m) > 1}
    assert not shared, f"aliases naming more than one module: {shared}"


def test_no_import_back_up_into_the_package() -> None:
    """The package's ``__init__`` re-exports the api: a module of the package imports none of its
    names (``__version__`` is ``mismatchctl.version``'s), only submodules through it."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        for node in _import_nodes(path):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name == "mismatchctl"]
            elif node.module == "mismatchctl" and node.level == 0:
                names = [a.name for a in node.names if not _is_module(f"mismatchctl.{a.name}")]
            else:
                names = []
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names]
    assert not wrong, "\n".join(wrong)


def test_the_package_version_is_the_leaf_module() -> None:
    import mismatchctl
    from mismatchctl import version

    assert mismatchctl.__version__ == version.__version__
    assert version.__version__.count(".") >= 2


def _dotted(path: Path, package: Path) -> str:
    """The module a file of the package is: ``mismatchctl.analysis.diagnose`` for its
    ``__init__.py``."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports: every import statement, those in a
    function's body (lazy) and under ``if TYPE_CHECKING:`` included. ``from a.b import c`` is
    an import of ``a.b.c`` when that is a module, else of ``a.b``."""
    modules = {_dotted(p, package): p for p in sorted(package.rglob("*.py"))}
    name = package.name

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:  # a name imported from a module: the module
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        named: list[str] = []
        for node in _import_nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                named += [a.name for a in node.names]
        targets = {known(n) for n in named if n.split(".")[0] == name}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of the graph: its strongly connected components of more than one module
    (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((t for t in edges if t not in index or t in on_stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt is not None:  # back to a module of the path being walked
                low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while (top := stack.pop()) != node:
                        component.append(top)
                        on_stack.discard(top)
                    on_stack.discard(node)
                    if component:
                        found.append(sorted([node, *component]))
    return found


def test_no_circle_of_modules() -> None:
    """No two modules of the package import each other, directly or through others, not even
    lazily or for a type (docs/architecture.md "No circle of files"): a result does not import
    its view (the view imports the result; ``analysis/result_sections.py`` above both hands a
    result to its view), and what two modules share sits below both."""
    circles = _circles(_import_graph(PACKAGE))
    assert not circles, "modules that import each other:\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def _package(root: Path, result: str) -> Path:
    """A package ``pkg`` of three modules: ``sub/result.py`` (its text ``result``), its view
    ``sub/view.py`` importing the result's type, and ``floor.py`` below both."""
    package = root / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "result.py").write_text(result)
    (package / "sub" / "view.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.sub.result import R\n"
    )
    (package / "floor.py").write_text("x = 1\n")
    return package


def test_a_circle_through_lazy_and_type_imports_is_found(tmp_path: Path) -> None:
    """The check above sees the imports a module makes in a function's body and for its types
    only: a result importing its view lazily, the view importing the result's type, is a
    circle; without the result's import of its view there is none."""
    lazy = (
        "from pkg.floor import x\n\nclass R:\n    def show(self):\n"
        "        from pkg.sub.view import show\n\n        return show(self)\n"
    )
    graph = _import_graph(_package(tmp_path / "lazy", lazy))
    assert graph["pkg.sub.result"] == {"pkg.floor", "pkg.sub.view"}
    assert graph["pkg.sub.view"] == {"pkg.sub.result"}
    assert _circles(graph) == [["pkg.sub.result", "pkg.sub.view"]]
    assert _circles(_import_graph(_package(tmp_path / "plain", "from pkg.floor import x\n"))) == []


def test_circles_are_found_through_several_modules() -> None:
    """A circle of three modules is one circle; a module that only points into it is not in it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
