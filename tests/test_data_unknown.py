"""The [UNK] share of a task (`maskbench.data.unknown`): counted per split with the strings that
became [UNK], written into the task card, and a task above `tokenizer.max_unknown_rate` refused
with those strings named, nothing written."""

from collections import Counter

import pytest
from transformers import AutoTokenizer

from maskbench.data import tasks
from maskbench.data.tasks import TaskData, prepare_task
from maskbench.data.unknown import unknown_tokens


def test_counts_unknown_tokens_and_names_the_strings_they_were(task_tokenizers):
    text = AutoTokenizer.from_pretrained(task_tokenizers["text"])
    counted = unknown_tokens(text, [{"text": "the ☃ sat", "text_pair": "a ☃ and a ♞"},
                                    {"question": "cat?", "context": "the ☃"}])
    assert counted["unknown"] == 4 and counted["top"] == {"☃": 3, "♞": 1}
    assert counted["tokens"] == len(text("the ☃ sat a ☃ and a ♞ cat? the ☃", add_special_tokens=False)["input_ids"])
    assert counted["rate"] == pytest.approx(4 / counted["tokens"])
    smiles = AutoTokenizer.from_pretrained(task_tokenizers["smiles"])
    assert unknown_tokens(smiles, [{"smiles": "N[C@@H](C)C(=O)[O-].[Na+]"}])["unknown"] == 0
    assert unknown_tokens(smiles, [{"smiles": "C?C"}])["top"] == {"?": 1}


def _task_of_rows(monkeypatch, config, rows):
    config["tasks"]["rotten_tomatoes"]["split"] = {"method": "predefined"}
    monkeypatch.setitem(tasks.TASK_READERS, "rotten_tomatoes",
                        lambda raw_dir: TaskData({"train": rows, "dev": rows[:2]}, Counter(), ["a", "b"]))


def test_task_card_records_the_share_per_split(tmp_path, config, monkeypatch, task_tokenizers):
    rows = [{"text": f"snippet {i} ☃", "text_pair": None, "label": i % 2} for i in range(4)]
    _task_of_rows(monkeypatch, config, rows)
    config["tokenizer"]["max_unknown_rate"] = 0.5
    card = prepare_task(config, "rotten_tomatoes", tmp_path / "raw", task_tokenizers["text"], tmp_path / "out",
                        tmp_path / "card.json")
    assert card["unknown_tokens"]["train"]["unknown"] == 4 and card["unknown_tokens"]["dev"]["top"] == {"☃": 2}
    assert card["unknown_tokens"]["train"]["rate"] == pytest.approx(4 / card["unknown_tokens"]["train"]["tokens"])


def test_a_share_above_the_setting_stops_the_task_naming_the_strings(tmp_path, config, monkeypatch, task_tokenizers):
    rows = [{"text": f"snippet {i} ☃ ☃ ♞", "text_pair": None, "label": i % 2} for i in range(4)]
    _task_of_rows(monkeypatch, config, rows)
    assert config["tokenizer"]["max_unknown_rate"] == 0.005  # params.yaml's default
    with pytest.raises(ValueError, match=r"tasks\.rotten_tomatoes: the tokenizer reads more than "
                                         r"tokenizer\.max_unknown_rate = 0\.50% .*\n  train: 12 of .* tokens "
                                         r"\(.*%\), most often '☃' x8, '♞' x4\n  dev: 6 of"):
        prepare_task(config, "rotten_tomatoes", tmp_path / "raw", task_tokenizers["text"], tmp_path / "out",
                     tmp_path / "card.json")
    assert not (tmp_path / "out").exists() and not (tmp_path / "card.json").exists()
    config["tokenizer"]["max_unknown_rate"] = 0.5  # the way out it names, taken knowingly
    card = prepare_task(config, "rotten_tomatoes", tmp_path / "raw", task_tokenizers["text"], tmp_path / "out",
                        tmp_path / "card.json")
    assert card["unknown_tokens"]["train"]["top"] == {"☃": 8, "♞": 4} and (tmp_path / "out/train.jsonl").is_file()
