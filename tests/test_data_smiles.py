"""The SMILES tokenizer (`maskbench.data.smiles`): tokens are chemical units, bracket atoms cut into
their parts, and drop no character; the saved tokenizer loads with transformers and round-trips;
every piece of the SMILES alphabet is in the vocabulary, whatever the corpus; other unseen
tokens are [UNK]."""

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from maskbench.data.smiles import SMILES_ALPHABET, SPECIAL_TOKENS, build_smiles_tokenizer, train_smiles_tokenizer

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


def split_smiles(smiles: str) -> list[str]:
    """The pieces the tokenizer's pre-tokenizers cut `smiles` into, before any vocabulary."""
    return [piece for piece, _ in build_smiles_tokenizer().pre_tokenizer.pre_tokenize_str(smiles)]


def test_regex_tokens_are_chemical_units():
    assert split_smiles("c1ccc2[nH]ccc2c1") == ["c", "1", "c", "c", "c", "2", "[", "n", "H", "]", "c", "c", "c", "2",
                                                "c", "1"]
    assert split_smiles("ClC%12Br") == ["Cl", "C", "%", "1", "2", "Br"]
    assert split_smiles("[13CH3][C@@H](Cl)[O-]") == ["[", "1", "3", "C", "H", "3", "]", "[", "C", "@@", "H", "]", "(",
                                                     "Cl", ")", "[", "O", "-", "]"]
    assert split_smiles("BCl") == ["B", "Cl"]
    # two-letter symbols are elements inside brackets only: Sc is scandium there, S and c outside
    assert split_smiles("[Sc]Sc1ccccc1") == ["[", "Sc", "]", "S", "c", "1", "c", "c", "c", "c", "c", "1"]
    assert split_smiles("[Na+].[Cl-]") == ["[", "Na", "+", "]", ".", "[", "Cl", "-", "]"]


def test_enantiomers_and_stereo_bonds_stay_apart_under_a_corpus_without_them(tmp_path):
    """MOSES has no stereocentre, charge, salt or stereo bond; the vocabulary still reads them."""
    tok = train_smiles_tokenizer(["CCO", "c1ccccc1N"], tmp_path / "t")
    assert set(SMILES_ALPHABET) <= set(tok.get_vocab())
    left, right = (tok(s)["input_ids"] for s in ("N[C@H](C)C(=O)[O-].[Na+]", "N[C@@H](C)C(=O)[O-].[Na+]"))
    assert left != right and tok.unk_token_id not in left + right
    for smiles in TRICKY:
        assert tok.unk_token_id not in tok(smiles)["input_ids"], smiles


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
    tok = train_smiles_tokenizer(["CC?", "CC!", "C?"], tmp_path / "t", min_frequency=2)
    assert set(tok.get_vocab()) == {*SPECIAL_TOKENS, *SMILES_ALPHABET, "?"}
    assert tok.convert_ids_to_tokens(tok("C!?")["input_ids"]) == ["[CLS]", "C", "[UNK]", "?", "[SEP]"]


def test_retraining_replaces_the_directory(tmp_path):
    train_smiles_tokenizer(["CC?"], tmp_path / "t")
    tok = train_smiles_tokenizer(["CC!"], tmp_path / "t")
    assert "!" in AutoTokenizer.from_pretrained(tmp_path / "t").get_vocab()
    assert "?" not in tok.get_vocab()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
