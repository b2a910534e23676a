"""The package stays readable: modules import one another one way (no import cycles, counting imports inside
functions), and no module is over 400 lines.

A lazy (function-level) import keeps a cycle from failing at import time, but the two modules still depend on
each other, and neither can be read, tested or moved without the other; so this graph counts both kinds.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "headswap"


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `package` (a package is named by its __init__.py)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _owner(name: str, modules) -> str | None:
    """The module that `name` (a module, or a name inside one) lives in; None outside the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names an import statement asks for, relative imports resolved against `package`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
    # `from a import b` imports module a.b when there is one, else the name b from a: _owner tells which
    return [f"{base}.{alias.name}" for alias in node.names]


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, within `package`, at any depth of the code.

    Importing a.b.c runs a/__init__.py and a/b/__init__.py first, so those count as imported too, except a
    module's own packages: they are already being imported when it runs (unless it names them itself)."""
    modules = module_files(package)
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        edges = graph[module]
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for name in _targets(node, own_package):
                target = _owner(name, modules)
                if target is None or target == module:
                    continue
                on_the_way = [p for p in _packages_above(target, modules) if not (module + ".").startswith(p + ".")]
                for imported in [target, *on_the_way]:
                    edges[imported] = min(node.lineno, edges.get(imported, node.lineno))
    return graph


def _packages_above(module: str, modules) -> list[str]:
    """The packages whose __init__.py runs before `module` does (a.b.c: a.b and a)."""
    parts = module.split(".")
    return [package for i in range(len(parts) - 1, 0, -1) if (package := ".".join(parts[:i])) in modules]


def _reachable(graph, start: str) -> set[str]:
    seen, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def cycle_groups(graph) -> list[list[str]]:
    """The strongly connected groups of more than one module: each module in one reaches every other."""
    reach = {m: _reachable(graph, m) for m in graph}
    groups, placed = [], set()
    for m in sorted(graph):
        if m in reach[m] and m not in placed:     # m lies on a cycle
            group = sorted(n for n in reach[m] if m in reach[n])
            placed.update(group)
            groups.append(group)
    return groups


def shortest_cycle(graph, group: list[str]) -> list[str]:
    """A shortest cycle through group[0], as the modules along it (the first one repeated at the end)."""
    start = group[0]
    came_from, todo = {}, deque([start])
    while todo:
        m = todo.popleft()
        for n in graph[m]:
            if n == start:
                path = [m]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path[::-1] + [start]
            if n in group and n not in came_from:
                came_from[n] = m
                todo.append(n)
    raise AssertionError(f"{group} holds no cycle through {start}")


def describe(graph, group: list[str]) -> str:
    cycle = shortest_cycle(graph, group)
    steps = "; ".join(f"{a} imports {b} at line {graph[a][b]}" for a, b in zip(cycle, cycle[1:]))
    return f"{' -> '.join(cycle)} ({steps}); all of {', '.join(group)} reach one another"


def test_the_package_has_no_import_cycles():
    graph = import_graph(PACKAGE)
    assert "headswap.settings" in graph and graph["headswap.cli.options"], "the graph did not read the package"
    cycles = [describe(graph, group) for group in cycle_groups(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    files = {"__init__.py": "", "a.py": "from pkg.sub import b\n", "d.py": "from pkg import a\n",
             "sub/__init__.py": "from pkg.sub.e import E\n",
             "sub/b.py": "def f():\n    from . import c\n",
             "sub/c.py": "import os\nfrom ..a import x\n",
             "sub/e.py": "def g():\n    from pkg.sub import E\n"}   # a module naming its own package
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    groups = cycle_groups(graph)
    assert groups == [["pkg.a", "pkg.sub.b", "pkg.sub.c"], ["pkg.sub", "pkg.sub.e"]]
    assert describe(graph, groups[0]).startswith("pkg.a -> pkg.sub.b -> pkg.sub.c -> pkg.a (pkg.a imports pkg.sub.b "
                                                 "at line 1; pkg.sub.b imports pkg.sub.c at line 2; ")


MAX_MODULE_LINES = 400   # issue 32: a module over ~400 lines is usually two modules


# A signal, not a rule that splits a concept: a module over the cap that reads as one thing stays whole, with its reason.
ALLOWANCE = {
    # TextClassifier, the estimator, read as one class (fit, predict, calibrate, save/load, and the thin entries to
    # suggest and explain); what it is built of already lives beside it in classifier/ (build, fit_data, fitted,
    # persist, reject_option, runtime).
    "headswap.classifier.estimator": 440,
}


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in module_files(PACKAGE).items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > ALLOWANCE.get(name, MAX_MODULE_LINES)}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


# What everything uses (settings, errors, metrics, quiet, telemetry) and the package's face; every other module
# lives in the family it belongs to (classifier, decisions, saved, baseline, jobs, reports, ...).
MAX_LOOSE_AT_ROOT = 8


def test_the_root_holds_few_loose_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_AT_ROOT, f"{len(loose)} modules loose at the package's root: {loose}"


def private_imports(package: Path) -> list[str]:
    """`from P.m import _name` where P is not the importing module's own package: a private name crossing
    packages, which ties the importer to what its owner may change freely."""
    found = []
    for module, path in module_files(package).items():
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and node.module.rpartition(".")[0] != own_package and node.module != own_package:
                    found.append(f"{module} (line {node.lineno}) imports {alias.name} from {node.module}")
    return found


def test_no_module_imports_another_packages_private_names():
    assert private_imports(PACKAGE) == []


def test_a_private_name_crossing_packages_is_found(tmp_path):
    files = {"__init__.py": "", "a/__init__.py": "", "a/x.py": "def _p(): pass\n",
             "a/y.py": "from pkg.a.x import _p\n",            # its own package: allowed
             "b/__init__.py": "", "b/z.py": "def f():\n    from pkg.a.x import _p, __doc__\n"}
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    assert private_imports(tmp_path / "pkg") == ["pkg.b.z (line 2) imports _p from pkg.a.x"]


def duration_formatting(package: Path) -> list[str]:
    """Where an f-string divides by 60 or 3600 to say a duration."""
    found = []
    for module, path in module_files(package).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FormattedValue) and any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv))
                    and isinstance(n.right, ast.Constant) and n.right.value in (60, 3600)
                    for n in ast.walk(node.value)):
                found.append(module)
    return sorted(set(found))


def test_one_duration_formatter():
    """Durations read the same in every report and log line: headswap.reports.report_text.duration says them all
    (auto's --budget round trip, fmt_seconds, writes the flag's syntax, not prose)."""
    assert duration_formatting(PACKAGE) == ["headswap.reports.report_text"]
    from headswap.reports.report_text import duration
    assert [duration(s) for s in (4.54, 45, 150, 7200)] == ["4.5 s", "45 s", "2.5 min", "2.0 h"]
    assert duration(None, "–") == "–"


def test_the_development_guide_maps_every_family(tmp_path):
    """docs/development.md's map names every family the code has, and its picture is drawn from the code."""
    import importlib.util
    root = PACKAGE.parents[1]
    spec = importlib.util.spec_from_file_location("package_map", root / "docs" / "package_map.py")
    package_map = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package_map)
    edges = package_map.imports()
    rows = package_map.floors(edges)          # exits naming the circle when families import one another
    assert rows[-1] == ["cli"], rows
    guide = (root / "docs" / "development.md").read_text(encoding="utf-8")
    unnamed = [f for f in edges if f"`{f}/`" not in guide and f"`{f}.py`" not in guide]
    assert unnamed == [], f"families missing from docs/development.md's map: {unnamed}"
    package_map.draw(package_map.reduced(edges), rows, tmp_path / "map.png")
    assert (tmp_path / "map.png").stat().st_size > 10_000


# Families that stand side by side on what both use (trials/, reports/): neither imports the other. auto once took
# bench/ as its toolkit; what both need lives below them now.
APART = (("auto", "bench"), ("bench", "auto"))
# (importing module, imported module, name): the only imports across APART, each with its reason.
APART_EXCEPTIONS: set = set()


def imports_across(package: Path, importer: str, imported: str) -> set[tuple[str, str, str]]:
    """(module, imported module, name) for every import, at any depth, by a module of family `importer` from one of
    family `imported` (`import m` gives the name "*")."""
    root, found = package.name, set()
    for module, path in module_files(package).items():
        if not (module + ".").startswith(f"{root}.{importer}."):
            continue
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [(alias.name, (alias.name, "*")) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):     # `from pkg import b` asks for pkg.b too
                names = [(name, tuple(name.rsplit(".", 1))) for name in _targets(node, own_package)]
            else:
                continue
            found.update((module, *pair) for name, pair in names if (name + ".").startswith(f"{root}.{imported}."))
    return found


def test_auto_and_bench_import_nothing_of_each_other():
    found = set().union(*(imports_across(PACKAGE, a, b) for a, b in APART))
    assert found - APART_EXCEPTIONS == set(), "move what both use below them (trials/, reports/)"


def test_an_import_across_families_is_found(tmp_path):
    files = {"__init__.py": "", "a/__init__.py": "", "a/x.py": "def f():\n    from pkg.b.y import g\n",
             "a/z.py": "import pkg.b\nfrom ..b import y\nfrom pkg import b, c\n", "b/__init__.py": "",
             "b/y.py": "from pkg.a.x import f\n", "c.py": ""}
    for name, text in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    assert imports_across(tmp_path / "pkg", "a", "b") == {("pkg.a.x", "pkg.b.y", "g"), ("pkg.a.z", "pkg.b", "*"),
                                                          ("pkg.a.z", "pkg.b", "y"), ("pkg.a.z", "pkg", "b")}
