"""Markdown tables, written in one place: every table of the report, and the index's, is a
header and rows of cells, each cell already the text it shows; and names listed in prose."""

from __future__ import annotations

from collections.abc import Iterable


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    """The lines of a markdown table: `header`, the separator, one line per row of `rows`. Cells
    are written as given: a "|" in one must come escaped. A row of another width than the header
    is refused: markdown would shift its cells into the wrong columns without a word."""
    rows = list(rows)
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a table row has {len(row)} cells for {len(header)} columns "
                             f"({header[0]!r} ...): {row}")
    return [_line(header), "|" + "---|" * len(header), *(_line(row) for row in rows)]


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def names(found: Iterable[str] | str | None) -> str:
    """Names (runs, tasks) as prose shows them: "`mlm`, `ar`", or "none", never a Python list."""
    found = [found] if isinstance(found, str) else list(found or [])
    return ", ".join(f"`{name}`" for name in found) or "none"
