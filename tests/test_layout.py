"""Every app reads in one sitting (STYLE, "Size and comments"): no function over 50 lines, no module over 350.
Which app may import which, and runs only the queue's public modules, is import-linter's (pyproject.toml)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = ("agentos_project", "queueing", "runs", "agents_registry", "bench")
MODULES = [path for app in APPS for path in sorted((ROOT / app).rglob("*.py")) if "migrations" not in path.parts]


def test_no_function_of_an_app_is_over_50_lines():
    long = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                if node.end_lineno - first + 1 > 50:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - first + 1

    assert long == {}


def test_no_module_of_an_app_is_over_350_lines():
    lines = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES}

    assert {name: count for name, count in lines.items() if count > 350} == {}
