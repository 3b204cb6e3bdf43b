"""`maskbench baseline --task T`: what a task gives without any encoder.

Baselines, by task kind:
- classification: `majority`, the train split's majority class with probability 1;
- regression: `train_mean`, the train mean for every row (its correlations are undefined);
- multitask_classification: `train_prior`, each task's train positive rate for every molecule
  (a constant: ROC-AUC 0.5 by construction, reported all the same);
- qa: `always_unanswerable`, the empty answer to every question;
- every SMILES task besides: `ecfp`, RDKit Morgan fingerprints (radius 2, 2,048 bits) with the
  linear model of `maskbench.controls.linear`, its regularisation chosen on dev.
All learn from the train rows fine-tuning uses and are scored on its dev and test rows
(`maskbench.controls.rows`), with its metric code.

`runs/baseline/{task}/metrics.json`:
    {"task": T, "metric": headline metric, "split": the split reported ("test", or "dev" where
     test has no labels, as fine-tuning reports),
     "baselines": {name: {"label": what it is, "value": headline score on `split`,
                          "scores": every metric fine-tuning records on `split`,
                          "dev": headline score on dev, "chosen": the grid point ({"C": 1.0}) or {}}}}
`runs/baseline/{task}/predictions.jsonl`: one line per baseline, split and row, fine-tuning's
lines with the baseline's name first: {"baseline", "split", "index", "prediction", "label"}
(QA: {"baseline", "split", "id", "prediction", "gold"}). Undefined scores are null.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdFingerprintGenerator
from scipy.stats import ConstantInputWarning

from maskbench.controls.linear import fit_on_dev
from maskbench.controls.rows import ControlData, read_task
from maskbench.eval.squad import squad_v2_final_scores
from maskbench.finetune.qa import OFFICIAL
from maskbench.controls import TRIVIAL
from maskbench.io import atomic_path, write_json

ECFP_RADIUS, ECFP_BITS = 2, 2048
LABELS = {"majority": "majority class", "train_mean": "train mean", "train_prior": "train positive rate",
          "always_unanswerable": "always unanswerable", "ecfp": "ECFP4 + linear model"}


def baselines(config: dict, task: str, task_dir: Path, card_path: Path, metrics_path: Path,
              predictions_path: Path) -> dict:
    """Score every baseline of `task`; write its metrics and predictions; return the metrics."""
    data = read_task(config, task, task_dir, card_path)
    results, records = {}, []
    if data.kind == "qa":
        results["always_unanswerable"], lines = _unanswerable(data)
        records += lines
    else:
        fits = {TRIVIAL[data.kind]: ({}, _constant(data))}
        if config["tasks"][task]["modality"] == "smiles":
            fit = fit_on_dev(data.kind, data.metric, {s: ecfp(task_dir, s, r) for s, r in data.rows.items()},
                             data.y, config["controls"], data.n_classes)
            fits["ecfp"] = (fit.chosen, fit.outputs)
        for name, (chosen, outputs) in fits.items():
            results[name] = _entry(name, data, outputs, chosen)
            records += [r for split in data.scored for r in data.records(split, outputs[split], baseline=name)]
    metrics = {"task": task, "metric": data.metric, "split": data.reported, "baselines": results}
    with atomic_path(predictions_path) as tmp, open(tmp, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    write_json(metrics_path, metrics)
    return metrics


def _entry(name: str, data: ControlData, outputs: dict[str, np.ndarray], chosen: dict) -> dict:
    with warnings.catch_warnings():  # a constant's correlations are undefined (null), as documented
        warnings.simplefilter("ignore", ConstantInputWarning)
        scores = data.scores(data.reported, outputs[data.reported])
        dev = data.scores("dev", outputs["dev"])[data.metric]
    return {"label": LABELS[name], "value": scores[data.metric], "scores": scores, "dev": dev, "chosen": chosen}


def _constant(data: ControlData) -> dict[str, np.ndarray]:
    """Every split's outputs of the kind's constant baseline, learnt from train."""
    train = data.y["train"]
    if data.kind == "classification":
        counts = np.bincount(train.astype(int), minlength=data.n_classes)
        value = np.eye(len(counts))[counts.argmax()]  # ties: the lowest class id
    elif data.kind == "regression":
        value = np.nanmean(train)
    else:  # a task without any train label gets 0.5
        known = ~np.isnan(train)
        value = np.where(known.any(0), np.nansum(train, 0) / np.maximum(known.sum(0), 1), 0.5)
    return {split: np.repeat(np.asarray(value, dtype=np.float64)[None], len(data.rows[split]), axis=0)
            for split in data.rows}


def _unanswerable(data: ControlData) -> tuple[dict, list[dict]]:
    """No answer anywhere (every question blanked), scored as fine-tuning scores QA (fractions,
    not percents)."""
    def scores(split):
        official = squad_v2_final_scores(data.rows[split], {r["id"]: "" for r in data.rows[split]})
        return {name: official[OFFICIAL[name]] / 100 for name in dict.fromkeys([data.metric, *OFFICIAL])}
    reported = scores(data.reported)
    entry = {"label": LABELS["always_unanswerable"], "value": reported[data.metric], "scores": reported,
             "dev": scores("dev")[data.metric], "chosen": {}}
    records = [{"baseline": "always_unanswerable", "split": split, "id": r["id"], "prediction": "",
                "gold": r["answers"]["text"]} for split in data.scored for r in data.rows[split]]
    return entry, records


def ecfp(task_dir: Path, split: str, rows: list[dict]) -> np.ndarray:
    """Morgan fingerprints (ECFP4: radius 2, 2,048 bits) of the rows' SMILES, (N, 2048) of 0/1."""
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=ECFP_RADIUS, fpSize=ECFP_BITS)
    features = np.zeros((len(rows), ECFP_BITS), dtype=np.float32)
    with rdBase.BlockLogs():
        for i, row in enumerate(rows):
            mol = Chem.MolFromSmiles(row["smiles"])
            if mol is None:
                raise ValueError(f"{task_dir / f'{split}.jsonl'}: RDKit cannot parse the SMILES {row['smiles']!r} "
                                 "(the task stage keeps only parseable molecules: re-run it)")
            features[i] = generator.GetFingerprintAsNumPy(mol)
    return features
