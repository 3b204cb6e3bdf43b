"""The normalised row every text-task reader yields, and the tab-separated reader they share.

    {"text": str, "text_pair": str | None, "label": int | float | None}
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Iterator, Sequence

from maskbench.data.rawfiles import open_text

Row = dict  # {"text": str, "text_pair": str | None, "label": int | float | None}


def append_pair(rows: list[Row], skipped: Counter, text: str, text_pair: str | None, label) -> None:
    """Append a row of stripped text; an empty text or pair is counted as `empty_text` instead."""
    text = (text or "").strip()
    text_pair = text_pair.strip() if text_pair is not None else None
    if not text or text_pair == "":
        skipped["empty_text"] += 1
    else:
        rows.append({"text": text, "text_pair": text_pair, "label": label})


def read_tsv(
    path: str | os.PathLike, required: Sequence[str], skipped: Counter, header: Sequence[str] | None = None
) -> Iterator[dict[str, str]]:
    """Records of a tab-separated file without quoting; lines with the wrong number of fields are
    counted as ``wrong_field_count``. ``header`` names the columns of a file that has no header row."""
    with open_text(path, newline="") as f:
        lines = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        columns = list(header) if header is not None else next(lines, [])
        missing = [c for c in required if c not in columns]
        if missing:
            raise ValueError(f"{os.fspath(path)}: missing column(s) {missing}; columns found: {columns}")
        for fields in lines:
            if len(fields) != len(columns):
                skipped["wrong_field_count"] += 1
                continue
            yield dict(zip(columns, fields))
