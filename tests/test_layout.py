"""Rules of the package's layout that imports alone would not enforce."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield path.relative_to(ROOT), alias.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield path.relative_to(ROOT), node.module


def test_the_engine_imports_neither_the_console_nor_the_demo_project():
    offending = [
        (str(path), module)
        for path, module in imported_modules("jobs")
        if module.split(".")[0] in {"dashboard", "jobsite"}
    ]

    assert offending == []


@pytest.mark.parametrize("package", ["jobs", "dashboard"])
def test_the_tasks_framework_is_imported_only_through_jobs_compat(package):
    offending = [
        (str(path), module)
        for path, module in imported_modules(package)
        if module.split(".")[0] == "django_tasks"
        or module == "django.tasks"
        or module.startswith("django.tasks.")
        if path != Path("jobs/compat.py")
    ]

    assert offending == []


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path, modules):
    """Project modules that `path` imports when it is loaded (imports inside functions are
    deliberate late imports and do not count)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def test_no_import_cycle_among_the_project_modules():
    paths = [p for package in ("jobs", "dashboard") for p in (ROOT / package).rglob("*.py")]
    paths = [p for p in paths if "migrations" not in p.parts]
    modules = {module_name(p): p for p in paths}
    graph = {name: set(top_level_imports(path, modules)) for name, path in modules.items()}
    assert graph["jobs.worker"] >= {"jobs.db", "jobs.pool.supervisor"}  # the walk sees real imports

    cycles = []
    done, on_path = set(), []

    def visit(name):
        if name in on_path:
            cycles.append(on_path[on_path.index(name) :] + [name])
            return
        if name in done:
            return
        on_path.append(name)
        for target in sorted(graph[name]):
            visit(target)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    assert cycles == []
