"""GLUE: the 8 tasks the papers fine-tune on, from the official TSV directory or the Hugging Face
hub, plus the offline stand-ins used when neither is reachable.

Every source yields the same normalised rows, so fine-tuning never knows where data came from:

    {"text": str, "text_pair": str | None, "label": int | float | None}

``label`` is the class id of the Hugging Face ``nyu-mll/glue`` ClassLabel (so a model trained on
the TSVs and one trained on the hub agree), a float for STS-B, and None in the unlabeled test
splits. Readers return ``(rows, skipped)`` with a ``Counter`` of dropped rows by reason.

Official TSV layout (``glue_data/<Task>/<split>.tsv``): tab-separated, no quoting at all (a ``"``
is part of the text, hence ``csv.QUOTE_NONE``), a header row except in CoLA's train/dev files,
MRPC's train/dev headers start with a UTF-8 byte-order mark (dropped on reading), and MNLI has
``dev_matched``/``dev_mismatched``/``test_matched``/``test_mismatched`` files.

The offline stand-ins for the single-sentence and sentence-pair tasks (VADER movie-review
snippets, BoolQ) are not GLUE tasks and have readers of their own (maskbench.data.vader,
maskbench.data.boolq).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from maskbench.data.text_rows import Row, append_pair, read_tsv

SPLIT_FILES = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
MNLI_SPLIT_FILES = {
    "train": "train.tsv",
    "validation_matched": "dev_matched.tsv",
    "validation_mismatched": "dev_mismatched.tsv",
    "test_matched": "test_matched.tsv",
    "test_mismatched": "test_mismatched.tsv",
}


@dataclass(frozen=True)
class GlueTask:
    """How one GLUE task is laid out in the official TSVs and on the hub."""

    directory: str  # folder name inside the GLUE data directory
    tsv_text_columns: tuple[str, str | None]  # header names of the sentence (pair) columns
    tsv_label_column: str
    tsv_labels: tuple[str, ...] | None  # label strings in class-id order; None: STS-B's 0-5 score
    hub_text_columns: tuple[str, str | None]
    split_files: dict[str, str] = field(default_factory=lambda: SPLIT_FILES)
    headerless_columns: tuple[str, ...] | None = None  # CoLA train/dev: column names of a file without header

    def columns_without_header(self, split: str) -> tuple[str, ...] | None:
        """The column names of ``split``'s file when it has no header row (CoLA's labelled
        files), else None: its first line is the header."""
        return None if split.startswith("test") else self.headerless_columns


GLUE_TASKS: dict[str, GlueTask] = {
    "cola": GlueTask(
        "CoLA", ("sentence", None), "label", ("0", "1"), ("sentence", None),
        headerless_columns=("source", "label", "author_label", "sentence"),
    ),
    "sst2": GlueTask("SST-2", ("sentence", None), "label", ("0", "1"), ("sentence", None)),
    "mrpc": GlueTask("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("sentence1", "sentence2")),
    "qqp": GlueTask("QQP", ("question1", "question2"), "is_duplicate", ("0", "1"), ("question1", "question2")),
    "stsb": GlueTask("STS-B", ("sentence1", "sentence2"), "score", None, ("sentence1", "sentence2")),
    "mnli": GlueTask(
        "MNLI", ("sentence1", "sentence2"), "gold_label", ("entailment", "neutral", "contradiction"),
        ("premise", "hypothesis"), split_files=MNLI_SPLIT_FILES,
    ),
    "qnli": GlueTask("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"),
                     ("question", "sentence")),
    "rte": GlueTask("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"),
                    ("sentence1", "sentence2")),
}  # fmt: skip
STSB_RANGE = (0.0, 5.0)


def glue_task(name: str) -> GlueTask:
    if name not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; known: {sorted(GLUE_TASKS)}")
    return GLUE_TASKS[name]


def _check_split(name: str, task: GlueTask, split: str) -> None:
    if split not in task.split_files:
        raise ValueError(f"GLUE task {name!r} has no split {split!r}; known: {list(task.split_files)}")


def read_glue_tsv(name: str, split: str, glue_dir: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Read ``glue_dir/<Task>/<split file>`` in the official GLUE layout.

    Splits are named as on the hub: ``train``, ``validation``, ``test`` (MNLI:
    ``validation_matched`` etc.); test splits are unlabeled (``label`` None)."""
    task = glue_task(name)
    _check_split(name, task, split)
    return read_glue_tsv_file(name, split, os.path.join(glue_dir, task.directory, task.split_files[split]))


def read_glue_tsv_file(name: str, split: str, path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Read one official GLUE TSV file holding ``split`` of task ``name`` (see ``read_glue_tsv``)."""
    task = glue_task(name)
    _check_split(name, task, split)
    labeled = not split.startswith("test")
    first, second = task.tsv_text_columns
    required = [c for c in (first, second, task.tsv_label_column if labeled else None) if c]

    rows, skipped = [], Counter()
    for record in read_tsv(path, required, skipped, header=task.columns_without_header(split)):
        label = _parse_glue_label(task, record[task.tsv_label_column]) if labeled else None
        if isinstance(label, str):
            skipped[label] += 1
            continue
        append_pair(rows, skipped, record[first], record[second] if second else None, label)
    return rows, skipped


def headerless_files(name: str) -> set[str]:
    """The official files of task ``name`` without a header row, whose first line is a record."""
    task = glue_task(name)
    return {file for split, file in task.split_files.items() if task.columns_without_header(split)}


def glue_hub_rows(name: str, records: Iterable[Mapping]) -> tuple[list[Row], Counter]:
    """Normalised rows of ``nyu-mll/glue`` records as the `hf` source saves them; test labels (-1) become None."""
    task = glue_task(name)
    first, second = task.hub_text_columns
    rows, skipped = [], Counter()
    for number, record in enumerate(records):
        missing = [c for c in (first, second, "label") if c and c not in record]
        if missing:
            raise ValueError(f"nyu-mll/glue {name} record {number}: missing column(s) {missing}; "
                             f"found {sorted(record)}")
        label = record["label"]
        label = None if label == -1 else float(label) if task.tsv_labels is None else int(label)
        append_pair(rows, skipped, record[first], record[second] if second else None, label)
    return rows, skipped


def _parse_glue_label(task: GlueTask, text: str) -> int | float | str:
    """The class id (float score for STS-B), or the skip reason."""
    text = text.strip()
    if task.tsv_labels is not None:
        return task.tsv_labels.index(text) if text in task.tsv_labels else "label_outside_set"
    try:
        score = float(text)
    except ValueError:
        return "label_outside_set"
    return score if STSB_RANGE[0] <= score <= STSB_RANGE[1] else "label_outside_set"



