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
