"""The docs name the code as it is: every module, file and name of ours that docs/ and the README quote (as `code`)
exists, so a move or a rename that forgets them fails here (docs/benchmarks-history.md tells the past, as it was)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *(path for path in sorted((ROOT / "docs").glob("*.md")) if path.name != "benchmarks-history.md"),
]
PACKAGES = ("agentos_project", "queueing", "runs", "agents_registry", "bench", "tests")
QUOTED = re.compile(r"`([^`]+)`")
OURS = re.compile(rf"^(?:{'|'.join(PACKAGES)})[./][\w./]*$")


def _module(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _exists(name: str) -> bool:
    """A path (`runs/services/states.py`, a folder), or a dotted module optionally followed by a name it defines or
    imports (`runs.events.tail.Tail`; what follows that name, an attribute of it, is not checked)."""
    if "/" in name:
        return (ROOT / name).exists() or (ROOT / name).with_suffix(".py").exists()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = _module(parts[:end])
        if module is None:
            continue
        if end == len(parts):
            return True
        defined = rf"^\s*(?:async def|def|class)\s+{parts[end]}\b|^\s*{parts[end]}\s*[:=]|\bimport\b.*\b{parts[end]}\b"
        return re.search(defined, module.read_text(), re.MULTILINE) is not None
    return False


def quoted_names(text: str) -> set[str]:
    names = set()
    for quoted in QUOTED.findall(text):
        for word in re.split(r"[\s,()]+", quoted):
            word = word.rstrip(".:;")
            if OURS.match(word) and not word.startswith("runs/s"):  # "runs/s" is a rate
                names.add(word)
    return names


def test_every_module_the_docs_name_exists():
    missing = {doc.name: sorted(name for name in quoted_names(doc.read_text()) if not _exists(name)) for doc in DOCS}

    assert {doc: names for doc, names in missing.items() if names} == {}


def test_the_check_finds_a_name_that_moved():
    text = "`runs.events.eventbus` `runs.events.tail.Tail` `queueing/tickets/` `runs.services.states.run_park_calls`"

    assert sorted(name for name in quoted_names(text) if not _exists(name)) == [
        "runs.events.eventbus",
        "runs.services.states.run_park_calls",
    ]
