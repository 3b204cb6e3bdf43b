"""Murcko scaffolds and the scaffold split (`maskbench.data.scaffold`): side chains and chirality
stripped, a pinned split of a fixed set, no scaffold in two splits, bad input refused."""

import pytest

from maskbench.data.scaffold import murcko_scaffold, scaffold_split

# index: scaffold group
FIXED = [
    "Cc1ccccc1",  # 0 benzene
    "Oc1ccccc1",  # 1 benzene
    "CCO",  # 2 acyclic
    "CCc1ccccc1",  # 3 benzene
    "NC1CCCCC1",  # 4 cyclohexane
    "c1ccc2ccccc2c1",  # 5 naphthalene
    "CCN",  # 6 acyclic
    "Cc1ccncc1",  # 7 pyridine
    "OC1CCCCC1",  # 8 cyclohexane
    "c1ccccc1CCc1ccccc1",  # 9 bibenzyl
]


def test_scaffold_strips_side_chains_and_chirality():
    assert murcko_scaffold("CCc1ccccc1") == murcko_scaffold("Oc1ccccc1") == "c1ccccc1"
    assert murcko_scaffold("CCO") == ""
    assert murcko_scaffold("C[C@H]1CC[C@@H](C2CCCC2)C1") == murcko_scaffold("CC1CCC(C2CCCC2)C1")


def test_split_of_fixed_set_is_pinned():
    # sets by size, ties by first index, latest first (as DeepChem):
    # benzene(3), cyclohexane(2, from 4), acyclic(2, from 2), bibenzyl(9), pyridine(7), naphthalene(5)
    assert scaffold_split(FIXED) == ([0, 1, 3, 4, 8, 2, 6, 9], [7], [5])


def test_split_is_deterministic_and_partitions_indices():
    first = scaffold_split(FIXED * 3)
    assert first == scaffold_split(FIXED * 3)
    assert sorted(i for part in first for i in part) == list(range(30))


def test_no_scaffold_in_two_splits():
    smiles = FIXED + ["c1ccc2ncccc2c1", "Clc1ccc2ncccc2c1", "C1CC1", "CC1CC1", "c1ccoc1", "C1CCNCC1"]
    splits = scaffold_split(smiles, frac_train=0.6, frac_valid=0.2)
    scaffolds = [{murcko_scaffold(smiles[i]) for i in part} for part in splits]
    assert all(part for part in splits)
    assert not (scaffolds[0] & scaffolds[1] or scaffolds[0] & scaffolds[2] or scaffolds[1] & scaffolds[2])


def test_unparsable_smiles_is_an_error():
    with pytest.raises(ValueError, match="C1CC"):
        scaffold_split(["CCO", "C1CC"])


def test_bad_fractions_are_an_error():
    with pytest.raises(ValueError, match="frac_train"):
        scaffold_split(FIXED, frac_train=0.9, frac_valid=0.2)
