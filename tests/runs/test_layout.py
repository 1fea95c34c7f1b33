"""The runs app reads in one sitting (STYLE, "Size and comments"): no function over 50 lines, no module over 400;
and it uses the queue only through the queue's public modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "runs"
MODULES = [path for path in sorted(ROOT.rglob("*.py")) if "migrations" not in path.parts]
# What the queue offers the work it carries (`queueing.seam`'s docstring); everything else of it is its own.
QUEUE_PUBLIC = {"seam", "tickets", "models", "selectors", "shutdown", "metrics", "admin"}


def test_no_function_of_runs_is_over_50_lines():
    long = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                if node.end_lineno - first + 1 > 50:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - first + 1

    assert long == {}


def test_no_module_of_runs_is_over_400_lines():
    lines = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES}

    assert {name: count for name, count in lines.items() if count > 400} == {}


def test_runs_imports_only_the_queues_public_modules():
    private = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []  # the queue's modules this import reaches into (`queueing.tickets`, not below it)
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "queueing":
                modules = [f"queueing.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            for module in modules:
                parts = module.split(".")
                if parts[0] == "queueing" and (len(parts) != 2 or parts[1] not in QUEUE_PUBLIC):
                    private.add(f"{path.relative_to(ROOT)}: {module}")

    assert private == set()
