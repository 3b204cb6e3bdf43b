"""BoolQ's JSONL reader (`maskbench.data.boolq`): both file flavours, the overlap removal that
keeps dev questions out of train, and a missing key named with its line."""

import json

import pytest

from maskbench.data.boolq import read_boolq_jsonl, remove_overlap


def test_boolq_both_flavours_and_overlap_removal(tmp_path):
    superglue = [
        {"question": "is the sky blue", "passage": "Sky -- The sky is blue.", "idx": 0, "label": True},
        {"question": "do fish fly", "passage": "Fish -- Some fish glide.", "idx": 1, "label": False},
        {"question": "is it a test", "passage": "Test -- Unlabeled.", "idx": 0},
        {"question": "bad label", "passage": "X -- y", "idx": 2, "label": "maybe"},
    ]
    original = [{"question": "do fish fly", "title": "Fish", "answer": "False", "passage": "Some fish glide."}]
    (tmp_path / "combined.jsonl").write_text("\n".join(map(json.dumps, superglue)) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(map(json.dumps, original)) + "\n")
    combined, skipped = read_boolq_jsonl(tmp_path / "combined.jsonl")
    dev, _ = read_boolq_jsonl(tmp_path / "dev.jsonl")
    assert [r["label"] for r in combined] == [1, 0, None] and skipped == {"label_outside_set": 1}
    assert dev == [{"text": "do fish fly", "text_pair": "Fish -- Some fish glide.", "label": 0}]
    train, removed = remove_overlap([r for r in combined if r["label"] is not None], dev)
    assert train == combined[:1] and removed == {"in_held_out_split": 1}


def test_boolq_missing_key(tmp_path):
    (tmp_path / "bias.jsonl").write_text(json.dumps({"original_question": "q", "original_context": "c"}) + "\n")
    with pytest.raises(ValueError, match=r"bias\.jsonl line 1: missing key\(s\) \['question', 'passage'\]"):
        read_boolq_jsonl(tmp_path / "bias.jsonl")
