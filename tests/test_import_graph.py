"""The package's import graph: no cycle anywhere, and ``configuration/blocks.py`` a leaf.

Read from the source with ``ast`` (no module is imported): every ``import`` and
``from ... import`` statement, at module level or inside a function, is an edge; in
``from package import name`` the edge goes to ``package.name`` when that is a module
(``from contrastive_sentence_embeddings.training import run``), else to ``package``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import PROJECT_ROOT

PACKAGE = "contrastive_sentence_embeddings"
PACKAGE_DIR = PROJECT_ROOT / "src" / PACKAGE
# What configuration/ may not import: the code its blocks configure imports it.
NOT_FOR_CONFIG = ("training", "data", "evaluation", "pipelines")

# The package's folders, bottom up, each with the other folders it may import (the
# modules at the package root, Kedro's entry points, may import any). The same table
# opens docs/architecture.md.
ALLOWED_IMPORTS = {
    "runs": set(),
    "configuration": set(),
    "encoders": set(),
    "records": {"runs", "configuration"},
    "data": {"runs", "configuration"},
    "evaluation": {"runs", "configuration", "encoders", "records", "data"},
    "publishing": {"runs", "configuration", "encoders", "records", "data", "evaluation"},
    "training": {"runs", "configuration", "encoders", "records", "data", "evaluation", "publishing"},
    "pipelines": {"runs", "configuration", "encoders", "records", "data", "evaluation", "publishing", "training"},
}
# The package root holds only Kedro's and Python's entry points.
ROOT_MODULES = {"__init__", "__main__", "cli", "settings", "pipeline_registry"}


def module_files(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: set[str]) -> set[str]:
    """The package's modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package upwards
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            found.update(submodules or {base})
            if len(submodules) < len(node.names):
                found.add(base)  # a name defined in the module itself
    return {target for target in found if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as the list of its modules, the first repeated at the end;
    None when there is none (a depth-first search, each module visited once)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                finished = path.pop()
                done.add(finished)
                on_path.discard(finished)
                continue
            if target in on_path:
                return [*path[path.index(target):], target]
            if target not in done:
                path.append(target)
                on_path.add(target)
                stack.append(iter(sorted(graph[target])))
    return None


def shown(cycle: list[str]) -> str:
    return " -> ".join(name.removeprefix(f"{PACKAGE}.") for name in cycle)


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and f"{PACKAGE}.training.run" in graph[f"{PACKAGE}.pipelines.training.nodes"]
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {shown(cycle)}"


def test_config_imports_nothing_of_the_packages_it_configures():
    graph = import_graph()
    forbidden = tuple(f"{PACKAGE}.{package}" for package in NOT_FOR_CONFIG)
    reached, todo = set(), [f"{PACKAGE}.configuration.blocks", f"{PACKAGE}.configuration.loader"]
    while todo:  # what configuration/blocks.py imports, directly or through another module
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    assert not [name for name in reached if name.startswith(forbidden)], sorted(reached)


def folder_of(module: str) -> str:
    """The package folder a module is in (``training`` for ``<package>.training.run``),
    or its own name for a module at the package root."""
    return module.removeprefix(f"{PACKAGE}.").split(".")[0] if module != PACKAGE else "__init__"


def forbidden_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The (importer, imported) pairs of ``graph`` that cross into a folder the
    importer's folder may not import (:data:`ALLOWED_IMPORTS`), sorted."""
    return sorted((source, target) for source, targets in graph.items() for target in targets
                  if folder_of(source) in ALLOWED_IMPORTS and folder_of(target) != folder_of(source)
                  and folder_of(target) not in ALLOWED_IMPORTS[folder_of(source)])


def test_every_folder_imports_only_the_folders_below_it():
    graph = import_graph()
    folders = {folder_of(name) for name in graph}
    assert folders - ROOT_MODULES == set(ALLOWED_IMPORTS), "a folder or root module the table does not list"
    crossing = [shown([source, target]) for source, target in forbidden_imports(graph)]
    assert not crossing, "imports a folder may not make:\n" + "\n".join(crossing)
    # the table itself is layered: no folder may import one that may import it
    for folder, allowed in ALLOWED_IMPORTS.items():
        assert all(folder not in ALLOWED_IMPORTS[other] for other in allowed), folder


def test_the_layer_check_sees_an_upward_import():
    """A module of runs/ importing training/ is reported (the check can fail); the
    reverse import, and one inside a folder, are allowed."""
    graph = {f"{PACKAGE}.runs.locks": {f"{PACKAGE}.training.run"},
             f"{PACKAGE}.training.run": {f"{PACKAGE}.runs.locks", f"{PACKAGE}.training.saving"}}
    assert forbidden_imports(graph) == [(f"{PACKAGE}.runs.locks", f"{PACKAGE}.training.run")]


def test_a_cycle_is_found_and_shown_module_by_module():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert shown(find_cycle(graph)) == "a -> b -> c -> a"
    assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None


def test_function_level_and_submodule_imports_are_edges(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/leaf.py", "other.py"):
        (package / name).write_text("")
    (package / "main.py").write_text("def late():\n    from pkg.sub import leaf\n    from pkg import other, VERSION\n")
    modules = set(module_files(package))
    assert imported_modules("pkg.main", package / "main.py", modules) == {"pkg.sub.leaf", "pkg.other", "pkg"}
