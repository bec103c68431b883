"""Import rules from DESIGN.md ("Layout"), checked on the source of eventstore/ and condensers/.

Every import counts: module-level ones, lazy ones inside functions, those under
``if TYPE_CHECKING:``, and ``importlib.import_module``/``__import__`` calls with a literal
name. Relative imports are resolved to full module names, and ``from pkg import name``
where ``name`` is a submodule counts as an import of that submodule. Failure messages
name the file, line and kind of every offending import.
"""

from __future__ import annotations

import ast
import tomllib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("eventstore", "condensers")


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def package(self) -> str:
        """The package relative imports in this module start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Import:
    importer: str
    """The module that contains the import statement."""
    target: str
    """The absolute name imported (a submodule when ``from pkg import submodule``)."""
    path: Path
    line: int
    kind: str
    """``top-level``, ``lazy`` (inside a function) or ``TYPE_CHECKING``."""

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT)
        return f"{where}:{self.line}: {self.importer} imports {self.target} ({self.kind})"


def is_within(name: str, prefix: str) -> bool:
    """``name`` is the module ``prefix`` or one of its submodules."""
    return name == prefix or name.startswith(prefix + ".")


def discover(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Module]:
    """Every ``.py`` module under the packages, by full dotted name."""
    found: dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            found[name] = Module(name, path, is_package)
    return found


def declared_packages(root: Path = ROOT) -> set[str]:
    """Packages pyproject installs, including those mapped in from elsewhere
    (``eventstore._migrations`` is the top-level migrations/ folder)."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(setuptools.get("packages", [])) | set(setuptools.get("package-dir", {}))


def _resolve_relative(module: Module, level: int, name: str | None) -> str:
    base = module.package.split(".")
    if level - 1 >= len(base):
        raise AssertionError(f"{module.path}: relative import beyond the top-level package")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportCollector(ast.NodeVisitor):
    def __init__(self, module: Module, known: Iterable[str]) -> None:
        self.module = module
        self.known = set(known)
        self.imports: list[Import] = []
        self._functions = 0
        self._type_checking = 0

    def _add(self, target: str, node: ast.AST) -> None:
        kind = (
            "TYPE_CHECKING" if self._type_checking else "lazy" if self._functions else "top-level"
        )
        line = getattr(node, "lineno", 0)
        imp = Import(self.module.name, target, self.module.path, line, kind)
        if imp not in self.imports:  # ``from pkg import a, b`` is one import of pkg
            self.imports.append(imp)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._type_checking += 1
        for child in node.body:
            self.visit(child)
        self._type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = _resolve_relative(self.module, node.level, node.module)
        else:
            base = node.module or ""
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            self._add(submodule if submodule in self.known else base, node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        dynamic = (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")) or (
            isinstance(func, ast.Attribute) and func.attr == "import_module"
        )
        if (
            dynamic
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                name = _resolve_relative(self.module, level, name.lstrip(".") or None)
            self._add(name, node)
        self.generic_visit(node)


def collect_imports(module: Module, known: Iterable[str]) -> list[Import]:
    """Every import in ``module``; ``known`` names the modules ``from pkg import name`` may
    refer to as a submodule."""
    collector = _ImportCollector(module, known)
    collector.visit(ast.parse(module.path.read_text(encoding="utf-8"), str(module.path)))
    return collector.imports


MODULES = discover()
KNOWN = set(MODULES) | declared_packages()
IMPORTS = [imp for module in MODULES.values() for imp in collect_imports(module, KNOWN)]


def import_graph(
    imports: Iterable[Import], known: dict[str, Module]
) -> dict[str, dict[str, list[Import]]]:
    """module -> imported project module -> the imports that make the edge."""
    graph: dict[str, dict[str, list[Import]]] = {name: {} for name in known}
    for imp in imports:
        if imp.target in known and imp.target != imp.importer:
            graph[imp.importer].setdefault(imp.target, []).append(imp)
    return graph


def strongly_connected(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def shortest_cycle(graph: dict[str, dict[str, list[Import]]], start: str) -> list[str]:
    """The shortest path start -> ... -> start (breadth first), or [] when there is none."""
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node]):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(parents[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if succ not in parents:
                parents[succ] = node
                queue.append(succ)
    return []


def describe_cycles(graph: dict[str, dict[str, list[Import]]]) -> Iterator[str]:
    """One paragraph per strongly connected component: its modules and its short cycles,
    each hop with the import statements that make it."""
    for component in strongly_connected(graph):
        yield f"cycle among {len(component)} modules: {', '.join(component)}"
        seen: set[frozenset[tuple[str, str]]] = set()
        for start in component:
            cycle = shortest_cycle(graph, start)
            hops = frozenset(zip(cycle, cycle[1:], strict=False))
            if not cycle or hops in seen:
                continue
            seen.add(hops)
            yield "  " + " -> ".join(cycle)
            for a, b in zip(cycle, cycle[1:], strict=False):
                sites = graph[a][b]
                lines = ", ".join(f"{imp.line} ({imp.kind})" for imp in sites)
                yield f"      {a} -> {b}: {sites[0].path.relative_to(ROOT)} line {lines}"


def _report(title: str, offenders: Iterable[object]) -> str:
    return title + "\n" + "\n".join(f"  {o}" for o in offenders)


# --------------------------------------------------------------------------- the scanner itself


def test_the_scanner_sees_lazy_type_checking_relative_and_dynamic_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from .sub import b\n"
        "def f():\n"
        "    from .sub.b import thing\n"
        "    import importlib\n"
        "    return importlib.import_module('litellm')\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from ..a import f\nfrom .. import a, mapped\n")
    modules = discover(tmp_path, ["pkg"])
    assert set(modules) == {"pkg", "pkg.a", "pkg.sub", "pkg.sub.b"}
    # A package installed from another folder is a submodule too, though not scanned.
    known = set(modules) | {"pkg.mapped"}
    imports = [imp for module in modules.values() for imp in collect_imports(module, known)]
    found = {(imp.importer, imp.target, imp.kind) for imp in imports}
    assert found == {
        ("pkg", "pkg.a", "top-level"),
        ("pkg.a", "typing", "top-level"),
        ("pkg.a", "json", "top-level"),
        ("pkg.a", "pkg.sub.b", "TYPE_CHECKING"),
        ("pkg.a", "pkg.sub.b", "lazy"),
        ("pkg.a", "importlib", "lazy"),
        ("pkg.a", "litellm", "lazy"),
        ("pkg.sub.b", "pkg.a", "top-level"),
        ("pkg.sub.b", "pkg.mapped", "top-level"),
    }
    graph = import_graph(imports, modules)
    assert strongly_connected(graph) == [["pkg.a", "pkg.sub.b"]]
    assert shortest_cycle(graph, "pkg.a") == ["pkg.a", "pkg.sub.b", "pkg.a"]


def test_the_scanner_finds_the_project_modules() -> None:
    for name in ("eventstore", "eventstore.llm", "eventstore.views", "condensers"):
        assert name in MODULES, f"{name} not found under {ROOT}; update tests/test_layers.py"
    assert any(imp.kind == "lazy" for imp in IMPORTS)
    assert any(imp.kind == "TYPE_CHECKING" for imp in IMPORTS)


# --------------------------------------------------------------------------- the rules


LAYERS_ABOVE_THE_LIBRARY = ("eventstore.cli", "eventstore.adapters")


def test_library_does_not_import_condensers() -> None:
    """Only the layers on top (eventstore.cli, eventstore.adapters) may use condensers;
    the rest of eventstore sits below them."""
    offenders = [
        str(imp)
        for imp in IMPORTS
        if is_within(imp.importer, "eventstore")
        and not any(is_within(imp.importer, layer) for layer in LAYERS_ABOVE_THE_LIBRARY)
        and is_within(imp.target, "condensers")
    ]
    assert not offenders, _report(
        "eventstore modules outside cli/ and adapters/ import condensers "
        "(move the code into eventstore.cli or eventstore.adapters, or the feature "
        "into condensers):",
        offenders,
    )


def test_only_eventstore_litellm_imports_litellm() -> None:
    """Importing litellm costs seconds and reaches for the network, so one module owns it."""
    offenders = [
        str(imp)
        for imp in IMPORTS
        if is_within(imp.target, "litellm") and imp.importer != "eventstore.llm"
    ]
    assert not offenders, _report(
        "litellm is imported outside eventstore.llm (go through its functions):",
        offenders,
    )


VIEWS_MUST_NOT_IMPORT = ("sqlalchemy", "eventstore.store", "eventstore._sql", "eventstore._core")


def test_views_import_neither_sqlalchemy_nor_the_store_nor_the_statement_layer() -> None:
    """views is pure: it assembles and renders a View from rows it is given."""
    views = [name for name in MODULES if is_within(name, "eventstore.views")]
    assert views, "eventstore.views not found; update tests/test_layers.py"
    offenders = [
        str(imp)
        for imp in IMPORTS
        if is_within(imp.importer, "eventstore.views")
        and any(is_within(imp.target, banned) for banned in VIEWS_MUST_NOT_IMPORT)
    ]
    assert not offenders, _report(
        f"eventstore.views imports {', '.join(VIEWS_MUST_NOT_IMPORT)} "
        "(views gets rows as arguments; SQL lives in the statement layer):",
        offenders,
    )


def test_views_do_not_reach_sqlalchemy_or_the_store_through_other_modules() -> None:
    """The rule above, followed through every project module views imports (lazy and
    TYPE_CHECKING ones included): importing a module that imports sqlalchemy, the store or
    the statement layer ties views to the database just as well."""
    graph = import_graph(IMPORTS, MODULES)
    by_importer: dict[str, list[Import]] = {}
    for imp in IMPORTS:
        by_importer.setdefault(imp.importer, []).append(imp)
    chains: list[str] = []
    starts = [name for name in MODULES if is_within(name, "eventstore.views")]
    paths = {name: [name] for name in starts}
    queue = deque(starts)
    while queue:
        module = queue.popleft()
        if len(paths[module]) > 1:  # direct imports are the rule above's
            for imp in by_importer.get(module, []):
                if any(is_within(imp.target, banned) for banned in VIEWS_MUST_NOT_IMPORT):
                    chains.append(f"{' -> '.join(paths[module])} -> {imp.target}   [{imp}]")
        for succ in sorted(graph[module]):
            if succ not in paths and not any(
                is_within(succ, banned) for banned in VIEWS_MUST_NOT_IMPORT
            ):
                paths[succ] = [*paths[module], succ]
                queue.append(succ)
    assert not chains, _report(
        "eventstore.views reaches the database layer through other modules:", chains
    )


def test_project_modules_import_each_other_without_cycles() -> None:
    """Counting every import, lazy and TYPE_CHECKING ones included: a lazy import that
    closes a cycle still ties the two modules into one."""
    cycles = list(describe_cycles(import_graph(IMPORTS, MODULES)))
    assert not cycles, _report("import cycles among project modules:", cycles)


def test_library_never_imports_the_cli_application() -> None:
    offenders = [
        str(imp)
        for imp in IMPORTS
        if is_within(imp.importer, "eventstore")
        and not is_within(imp.importer, "eventstore.cli")
        and imp.importer != "eventstore.__main__"  # ``python -m eventstore``: the CLI
        and is_within(imp.target, "eventstore.cli")
    ]
    assert not offenders, _report(
        "the library imports the application eventstore.cli (invert the dependency: "
        "the cli calls the library):",
        offenders,
    )


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_across_modules(modules: dict[str, Module], known: set[str]) -> Iterator[str]:
    """Every use of another module's underscore name: ``from m import _name`` (a private
    *module* is fine) and ``m._name`` where ``m`` is a project module imported by name."""
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        aliases: dict[str, str] = {}
        where = module.path.relative_to(ROOT) if module.path.is_relative_to(ROOT) else module.path
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (
                    _resolve_relative(module, node.level, node.module)
                    if node.level
                    else node.module or ""
                )
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in known:
                        aliases[alias.asname or alias.name] = full
                    elif (
                        _private(alias.name)
                        and base != module.name
                        and any(is_within(base, p) for p in PACKAGES + ("pkg",))
                    ):
                        yield f"{where}:{node.lineno}: imports {alias.name} from {base}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in known:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
                and aliases[node.value.id] != module.name
            ):
                yield f"{where}:{node.lineno}: uses {aliases[node.value.id]}.{node.attr}"


def test_the_private_name_scanner_finds_both_forms(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_a.py").write_text("_x = 1\ny = 2\n")
    (pkg / "b.py").write_text("from . import _a\nfrom ._a import _x, y\nz = _a._x + _a.y\n")
    modules = discover(tmp_path, ["pkg"])
    found = list(private_names_across_modules(modules, set(modules)))
    assert [f.split(": ", 1)[1] for f in found] == ["imports _x from pkg._a", "uses pkg._a._x"]


def test_no_private_name_crosses_a_module() -> None:
    """A name another module imports is not private: it loses its underscore (private
    *modules* behind a public namespace are fine)."""
    found = sorted(private_names_across_modules(MODULES, KNOWN))
    assert not found, _report("underscore names used across modules:", found)


def test_every_package_is_installed() -> None:
    """pyproject names its packages by hand (``eventstore._migrations`` is the top-level
    migrations/ folder, which automatic discovery cannot map): a package missing from the
    list would be missing from every non-editable install."""
    packages = {name for name, module in MODULES.items() if module.is_package}
    assert packages <= declared_packages(), sorted(packages - declared_packages())
