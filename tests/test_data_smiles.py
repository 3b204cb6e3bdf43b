"""The SMILES tokenizer (`maskbench.data.smiles`): regex tokens are chemical units and drop no
character, the saved tokenizer loads with transformers and round-trips, unseen tokens are [UNK]."""

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from maskbench.data.smiles import SPECIAL_TOKENS, split_smiles, train_smiles_tokenizer

TRICKY = [
    "c1ccc2[nH]ccc2c1",  # aromatic bracket atom with H
    "ClCCBr",  # two-letter organic atoms
    "C%10CCCCC%10",  # two-digit ring closure
    "C1CC2CCC1C2",  # one-digit ring closures
    "N[C@@H](C)C(=O)O",  # chirality
    "[13CH3]C(=O)[O-].[Na+]",  # isotope, charges, disconnected parts
    "C[N+](C)(C)C",
    "F/C=C\\F",  # stereo bonds
    "C#N",
    "[2H]OC",
    "Bc1ccccc1",  # boron, not to be read as Br
    "*C(=O)O",  # wildcard atom
    "[Fe+2]",
    "C1=CC=[Se]C=C1",
]


def test_regex_tokens_are_chemical_units():
    assert split_smiles("c1ccc2[nH]ccc2c1") == ["c", "1", "c", "c", "c", "2", "[nH]", "c", "c", "c", "2", "c", "1"]
    assert split_smiles("ClC%12Br") == ["Cl", "C", "%12", "Br"]
    assert split_smiles("[13CH3][C@@H](Cl)[O-]") == ["[13CH3]", "[C@@H]", "(", "Cl", ")", "[O-]"]
    assert split_smiles("BCl") == ["B", "Cl"]


@pytest.mark.parametrize("smiles", TRICKY)
def test_split_never_drops_characters(smiles):
    assert "".join(split_smiles(smiles)) == smiles


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok") / "smiles"
    train_smiles_tokenizer(iter(TRICKY), out)
    return out


def test_saved_tokenizer_loads_with_transformers(tokenizer_dir):
    for loader in (PreTrainedTokenizerFast, AutoTokenizer):
        tok = loader.from_pretrained(tokenizer_dir)
        assert tok.convert_ids_to_tokens(list(range(5))) == SPECIAL_TOKENS
        assert (tok.pad_token, tok.mask_token, tok.unk_token) == ("[PAD]", "[MASK]", "[UNK]")
        batch = tok(["C#N", "ClCCBr"], padding=True)
        assert batch["input_ids"][0][-1] == tok.pad_token_id == 0 and batch["attention_mask"][0] == [1, 1, 1, 1, 1, 0]


@pytest.mark.parametrize("smiles", TRICKY)
def test_round_trip(tokenizer_dir, smiles):
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    ids = tok(smiles)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", *split_smiles(smiles), "[SEP]"]
    assert tok.decode(ids, skip_special_tokens=True) == smiles


def test_unseen_token_is_unk_and_min_frequency_prunes(tmp_path):
    tok = train_smiles_tokenizer(["CCO", "CCN", "CS"], tmp_path / "t", min_frequency=2)
    assert set(tok.get_vocab()) == {*SPECIAL_TOKENS, "C"}
    assert tok.convert_ids_to_tokens(tok("CO")["input_ids"]) == ["[CLS]", "C", "[UNK]", "[SEP]"]


def test_retraining_replaces_the_directory(tmp_path):
    train_smiles_tokenizer(["CCO"], tmp_path / "t")
    tok = train_smiles_tokenizer(["CCBr"], tmp_path / "t")
    assert "Br" in AutoTokenizer.from_pretrained(tmp_path / "t").get_vocab()
    assert "O" not in tok.get_vocab()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
