"""The rows, targets and scoring the controls share with fine-tuning.

Training rows are the subset fine-tuning's first seed of the task learns from
(`max_train_examples`; all rows when it is null), so a control never sees more labelled data
than a fine-tuned cell; dev and test are the same fixed `max_eval_examples` subsets every
fine-tuned cell is scored on. The reported split is fine-tuning's: test where it has labels,
else dev (GLUE's unlabelled test sets).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from maskbench.config import finetune_settings, task_seeds
from maskbench.eval.metrics import all_scores
from maskbench.finetune.inputs import target_json, targets
from maskbench.finetune.loop import eval_subset, read_splits, train_subset
from maskbench.io import read_json, reading


@dataclass
class ControlData:
    """One task as the controls see it: rows per split ("train", "dev", maybe "test"), targets
    per split in fine-tuning's shapes (class ids (N,), values (N,), or (N, T) with NaN for a
    missing label; none for QA), the class or task names of the card, and the split reported."""

    task: str
    kind: str
    metric: str
    rows: dict[str, list[dict]]
    y: dict[str, np.ndarray]
    names: list[str] | None
    reported: str

    @property
    def n_classes(self) -> int | None:
        """Classification: the card's classes (else the largest train label + 1)."""
        if self.kind != "classification":
            return None
        return len(self.names) if self.names else int(np.nanmax(self.y["train"])) + 1

    @property
    def scored(self) -> list[str]:
        """The splits a control is scored and predicts on: dev, and the reported split."""
        return list(dict.fromkeys(["dev", self.reported]))

    def scores(self, split: str, outputs) -> dict[str, float]:
        """Every metric fine-tuning records for this kind (the headline first)."""
        return all_scores(self.kind, self.metric, self.y[split], outputs)

    def records(self, split: str, outputs, **tag) -> list[dict]:
        """Per-example lines in fine-tuning's predictions.jsonl shape, `tag` (the baseline's
        name) first."""
        return [{**tag, "split": split, "index": i, "prediction": np.asarray(o).tolist(), "label": target_json(y)}
                for i, (o, y) in enumerate(zip(outputs, self.y[split]))]


def read_task(config: dict, task: str, task_dir: Path, card_path: Path) -> ControlData:
    """The task's rows as fine-tuning reads them (see the module docstring)."""
    spec = config["tasks"][task]
    settings = finetune_settings(config, task)
    with reading(card_path):
        card = read_json(card_path)
    splits = read_splits(task, spec, task_dir, card)
    train = splits["train"]
    first_seed = task_seeds(config, task)[0]
    rows = {"train": [train[i] for i in train_subset(len(train), settings["max_train_examples"],
                                                     np.random.default_rng(first_seed))]}
    rows.update({s: eval_subset(splits[s], settings["max_eval_examples"]) for s in ("dev", "test") if s in splits})
    kind = spec["kind"]
    names = card.get("task_names") if kind == "multitask_classification" else card.get("label_names")
    y = {} if kind == "qa" else {s: _targets(kind, r) for s, r in rows.items()}
    test_labelled = bool(rows.get("test")) if kind == "qa" else "test" in y and not np.isnan(y["test"]).all()
    return ControlData(task, kind, spec["metric"], rows, y, names, "test" if test_labelled else "dev")


def _targets(kind: str, rows: list[dict]) -> np.ndarray:
    """Targets in the shapes `SequenceTask` trains on: (N,) for classification and regression,
    (N, T) for multi-task classification."""
    y = targets(rows)
    if kind == "regression":
        return y.reshape(len(y), -1)[:, 0] if len(y) else y
    if kind == "multitask_classification":
        return y.reshape(len(y), -1) if len(y) else y
    return y
