"""Deterministic Bemis-Murcko scaffold split, the way DeepChem's ScaffoldSplitter does it.

Molecules sharing a scaffold (ring systems plus the linkers between them, side chains removed)
go to the same split, so test molecules are structurally unlike training ones. Scaffold sets are
sorted largest first and poured into train until it would overflow 80%, then into valid until
90%, the rest into test: train gets the big common scaffolds, valid and test the rare ones.

Ties in set size are broken as DeepChem breaks them, by the set's first molecule index, latest
first, so a CSV gets exactly the split DeepChem's ScaffoldSplitter gives it. The order depends
only on the input order, never on how a given RDKit version spells a canonical scaffold, so the
split is the same on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from rdkit import Chem, rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold


def murcko_scaffold(smiles: str) -> str:
    """Canonical SMILES of the Bemis-Murcko scaffold, ignoring chirality; "" for acyclic molecules."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse SMILES {smiles!r}; drop unparsable molecules before splitting")
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold_split(
    smiles: Sequence[str], frac_train: float = 0.8, frac_valid: float = 0.1
) -> tuple[list[int], list[int], list[int]]:
    """Split molecule indices into (train, valid, test) so that no scaffold is in two splits."""
    if not (0 < frac_train and 0 <= frac_valid and frac_train + frac_valid <= 1):
        raise ValueError(
            f"need 0 < frac_train, 0 <= frac_valid, frac_train + frac_valid <= 1; got {frac_train}, {frac_valid}"
        )
    groups: dict[str, list[int]] = {}
    with rdBase.BlockLogs():  # RDKit's per-molecule warnings (e.g. lone [H]) do not change scaffolds
        for index, s in enumerate(smiles):
            groups.setdefault(murcko_scaffold(s), []).append(index)
    ordered = sorted(groups.values(), key=lambda members: (len(members), members[0]), reverse=True)

    train_cutoff = frac_train * len(smiles)
    valid_cutoff = (frac_train + frac_valid) * len(smiles)
    train: list[int] = []
    valid: list[int] = []
    test: list[int] = []
    for members in ordered:
        if len(train) + len(members) <= train_cutoff:
            train += members
        elif len(train) + len(valid) + len(members) <= valid_cutoff:
            valid += members
        else:
            test += members
    return train, valid, test
