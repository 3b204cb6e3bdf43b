"""How pretraining cuts its blocks from a token stream (`maskbench.train.blocks`): windows
anywhere, as every profile but `paper` trains; and whole documents, one (or one piece of a long
one) a block, a step's blocks of one length, drawn so every piece is equally likely; what
validation takes of each; and every objective training on the shortest documents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskbench.objectives.registry import OBJECTIVES
from maskbench.train import blocks as blocks_module
from maskbench.train.blocks import Documents, Windows, block_source, document_spans
from maskbench.train.validation import validation_sets
from tests.helpers import SPECIALS, VOCAB, make, objective_step

SEQ_LEN = 8  # bodies of 6 tokens


def stream_of(documents: list[list[int]]) -> np.ndarray:
    """Documents as the tokenize stage writes them: each followed by a [SEP]."""
    return np.array([t for doc in documents for t in doc + [SPECIALS.sep]], dtype=np.uint16)


def corpus(seed: int = 0, count: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(rng.integers(5, VOCAB, size=rng.integers(1, 15))) for _ in range(count)]


def body_of(block: torch.Tensor) -> list[int]:
    assert block[0] == SPECIALS.cls and block[-1] == SPECIALS.sep
    return block[1:-1].tolist()


def test_windows_are_the_stream_at_seeded_starts_framed():
    stream = np.arange(10, 110, dtype=np.uint16)
    drawn = Windows(stream, SEQ_LEN, SPECIALS).sample(5, np.random.default_rng([3, 7]))
    starts = np.random.default_rng([3, 7]).integers(0, stream.size - 6, size=5)  # the draw windows make
    assert [body_of(b) for b in drawn] == [list(range(10 + s, 16 + s)) for s in starts]


def test_document_spans_find_every_document_and_skip_empty_ones(monkeypatch):
    docs = corpus()
    stream = stream_of(docs[:3] + [[]] + docs[3:])  # an empty document: two [SEP]s in a row
    starts, lengths = document_spans(stream, SPECIALS.sep)
    assert [stream[s:s + n].tolist() for s, n in zip(starts, lengths)] == docs
    monkeypatch.setattr(blocks_module, "SCAN_CHUNK", 7)  # a scan in chunks finds the same
    assert all(np.array_equal(a, b) for a, b in zip(document_spans(stream, SPECIALS.sep), (starts, lengths)))
    # a stream whose last document lacks its [SEP] still has it
    assert document_spans(stream[:-1], SPECIALS.sep)[1][-1] == len(docs[-1])


def test_each_document_is_cut_into_pieces_that_never_span_two():
    docs = corpus()
    source = Documents(stream_of(docs), SEQ_LEN, SPECIALS)
    pieces = [source.stream[s:s + n].tolist() for s, n in zip(source.starts, source.lengths)]
    expected = [doc[i:i + 6] for doc in docs for i in range(0, len(doc), 6)]
    assert pieces == expected  # in the stream's order; a document of 14 tokens: 6 + 6 + 2
    assert SPECIALS.sep not in [t for piece in pieces for t in piece]


def test_a_step_holds_pieces_of_one_length_each_piece_as_likely_as_any_other():
    docs = corpus(count=60)
    source = Documents(stream_of(docs), SEQ_LEN, SPECIALS)
    pieces = [tuple(source.stream[s:s + n].tolist()) for s, n in zip(source.starts, source.lengths)]
    seen = []
    for step in range(3000):
        drawn = source.sample(3, np.random.default_rng([0, step]))
        assert len({len(body_of(b)) for b in drawn}) == 1  # one length a step: nothing padded
        seen += [tuple(body_of(b)) for b in drawn]
    assert set(seen) <= set(pieces)
    lengths, counts = np.unique([len(p) for p in seen], return_counts=True)
    expected = np.array([sum(len(p) == n for p in pieces) for n in lengths]) / len(pieces) * len(seen)
    # each length as often as its pieces' share says (the sd of a count here is below 1.5 % of the draws)
    np.testing.assert_allclose(counts, expected, atol=0.05 * len(seen))
    again = source.sample(3, np.random.default_rng([0, 11]))
    assert torch.equal(again, source.sample(3, np.random.default_rng([0, 11])))  # seeded: resumable


def test_validation_takes_the_first_pieces_grouped_by_length_with_fixed_masks():
    docs = corpus()
    source = Documents(stream_of(docs), SEQ_LEN, SPECIALS)
    sets = validation_sets(source, 10)  # as many tokens as 10 windows of 6: 60
    bodies = sorted(tuple(body_of(b)) for s in sets for b in s.blocks)
    held = np.cumsum(source.lengths)
    n = int(np.argmax(held >= 60)) + 1  # the first pieces that hold 60 tokens
    first = [tuple(source.stream[s:s + k].tolist()) for s, k in zip(source.starts[:n], source.lengths[:n])]
    assert bodies == sorted(first) and sum(map(len, first)) >= 60 > sum(map(len, first[:-1]))
    for part in sets:
        length = part.blocks.shape[1]
        assert ((part.masked_at > 0) & (part.masked_at < length - 1)).all()  # never the frame
    again = validation_sets(Documents(stream_of(docs), SEQ_LEN, SPECIALS), 10)
    assert all(torch.equal(a.masked_at, b.masked_at) for a, b in zip(sets, again))
    assert sum(len(s.blocks) for s in validation_sets(source, 10_000)) == source.starts.size  # no more than there are
    # windows: one set, the first non-overlapping windows
    (windows,) = validation_sets(Windows(stream_of(docs), SEQ_LEN, SPECIALS), 3)
    assert windows.blocks.shape == (3, SEQ_LEN)


def test_an_unknown_kind_and_a_stream_of_no_document_are_refused():
    with pytest.raises(ValueError, match=r"blocks='sentences'; expected one of \['windows', 'documents'\]"):
        block_source("sentences", stream_of(corpus()), SEQ_LEN, SPECIALS)
    with pytest.raises(ValueError, match="holds no document"):
        Documents(stream_of([[], []]), SEQ_LEN, SPECIALS)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
@pytest.mark.parametrize("body", [1, 2, 5])
def test_every_objective_trains_on_the_shortest_documents(name, body):
    """A one-token molecule ("C") is a block of three: every objective takes a step on it."""
    model = make(name, specials=SPECIALS)
    stream = stream_of([list(range(5, 5 + body))] * 3)
    drawn = Documents(stream, 2 + body, SPECIALS).sample(2, np.random.default_rng(0))
    assert drawn.shape == (2, 2 + body)
    if not model.trains:
        return
    out = objective_step(model, drawn, seed=0)
    out.loss.backward()
    assert torch.isfinite(out.loss)


def test_the_schema_offers_exactly_the_kinds_pretraining_cuts():
    from maskbench.config import read_yaml, schema_path
    from maskbench.train.blocks import BLOCK_SOURCES

    schema = read_yaml(schema_path())
    assert schema["$defs"]["pretrain_settings"]["properties"]["blocks"]["enum"] == list(BLOCK_SOURCES)
