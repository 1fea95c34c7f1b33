"""Plain-text tables and cell formats shared by the queue's management commands."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from django.utils import timezone

NONE = "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of `rows` under `headers`, columns two spaces apart, a dashed rule under the headers.

    A column whose every cell is a number is right-aligned (its header too); any other is left-aligned. Cells are
    shown with `str`, None as "-". Lines carry no trailing spaces, so tests can compare them exactly.
    """
    cells = [[NONE if value is None else value for value in row] for row in rows]
    numeric = [bool(cells) and all(isinstance(row[i], int | float) for row in cells) for i in range(len(headers))]
    texts = [list(headers), *([str(value) for value in row] for row in cells)]
    widths = [max(len(row[i]) for row in texts) for i in range(len(headers))]
    texts.insert(1, ["-" * width for width in widths])
    return [_line(row, widths, numeric) for row in texts]


def _line(cells: list[str], widths: list[int], numeric: list[bool]) -> str:
    padded = (
        cell.rjust(width) if right else cell.ljust(width)
        for cell, width, right in zip(cells, widths, numeric, strict=True)
    )
    return "  ".join(padded).rstrip()


def seconds(value: float | None) -> str:
    """A duration in whole seconds, as `3600s` (an operator reads ages, not milliseconds); "-" for None."""
    return NONE if value is None else f"{value:.0f}s"


def moment(value: datetime.datetime | None) -> str:
    """A time in the project's time zone to the second, as `2025-01-31 23:59:59`; "-" for None."""
    return NONE if value is None else timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


def short(text: str | None, width: int = 40) -> str:
    """The first line of `text`, cut to `width` characters, with an ellipsis when anything was left out; "-" for
    None or blank."""
    lines = (text or "").strip().splitlines()
    if not lines:
        return NONE
    if len(lines) == 1 and len(lines[0]) <= width:
        return lines[0]
    return f"{lines[0][: width - 1]}…"
