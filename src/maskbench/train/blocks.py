"""The blocks pretraining reads from a split's token stream, framed as [CLS] … [SEP]: the run's
`blocks` setting says how they are cut.

- `windows`: random windows of `seq_len - 2` tokens, wherever they fall, so a block may start
  mid-document and run across the [SEP] into the next ones. Every block is full; every profile
  but `paper` reads these.
- `documents`: a block is one document, or one piece of a document longer than a block (cut every
  `seq_len - 2` tokens from its start, the last piece shorter), never two documents: MAE-LM's
  official `complete_doc` blocks (fairseq cuts at sentence ends, which the stream does not keep)
  and ExLM's one molecule a SMILES sample. Nothing is padded, because every objective here works
  on full blocks (static shapes, an exact mask count per row): a step's blocks share one length,
  drawn in proportion to how many pieces have it, so every piece is equally likely to be drawn
  (fairseq batches samples of similar size together too). A step thus holds `batch_size` pieces
  of one length, up to `batch_size · seq_len` tokens.

The documents are what the tokenize stage separated by [SEP] (`maskbench.data.corpus`): a
WikiText article, a record of a hub dataset, a molecule. Both kinds draw a step's blocks from a
numpy Generator seeded by (seed, step) (`maskbench.train.pretrain`), and give validation its
fixed blocks from the stream's start (`first`), as many tokens in either kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from maskbench.objectives.base import SpecialTokens

SCAN_CHUNK = 1 << 26  # tokens compared with [SEP] at a time: the comparison's booleans stay at 64 MB


def frame(bodies: np.ndarray, specials: SpecialTokens) -> torch.Tensor:
    """Bodies (N, L) framed as [CLS] body [SEP]: (N, L + 2) int64 blocks."""
    blocks = np.empty((bodies.shape[0], bodies.shape[1] + 2), dtype=np.int64)
    blocks[:, 0], blocks[:, -1], blocks[:, 1:-1] = specials.cls, specials.sep, bodies
    return torch.from_numpy(blocks)


def _cut(stream: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    return np.stack([stream[s:s + length] for s in starts]).astype(np.int64)


@dataclass
class Windows:
    """Windows of `seq_len - 2` tokens of `stream`, anywhere."""

    stream: np.ndarray
    seq_len: int
    specials: SpecialTokens

    def sample(self, batch: int, rng: np.random.Generator) -> torch.Tensor:
        """`batch` windows at uniformly drawn starts."""
        body = self.seq_len - 2
        if self.stream.size <= body:
            raise ValueError(f"token stream has {self.stream.size} tokens, fewer than a block of {body}")
        return frame(_cut(self.stream, rng.integers(0, self.stream.size - body, size=batch), body), self.specials)

    def first(self, count: int) -> list[torch.Tensor]:
        """The first `count` consecutive non-overlapping windows (fewer if the stream is shorter), one group."""
        body = self.seq_len - 2
        n = min(count, self.stream.size // body)
        return [frame(np.asarray(self.stream[: n * body], dtype=np.int64).reshape(n, body), self.specials)]


def document_spans(stream: np.ndarray, sep: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the documents of `stream`, the runs of tokens between [SEP]s (a last one
    without its [SEP] included, empty ones left out), scanned `SCAN_CHUNK` tokens at a time so a
    stream of billions of tokens needs no stream-sized temporary."""
    ends = [np.flatnonzero(np.asarray(stream[at:at + SCAN_CHUNK]) == sep) + at
            for at in range(0, stream.size, SCAN_CHUNK)]
    ends = np.concatenate(ends + [np.array([stream.size])]).astype(np.int64)
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = ends - starts
    keep = lengths > 0
    return starts[keep], lengths[keep]


@dataclass
class Documents:
    """One document, or one `seq_len - 2`-token piece of a longer one, a block; a step's blocks
    share one length (module docstring)."""

    stream: np.ndarray
    seq_len: int
    specials: SpecialTokens

    def __post_init__(self):
        body = self.seq_len - 2
        starts, lengths = document_spans(self.stream, self.specials.sep)
        if not starts.size:
            raise ValueError(f"token stream of {self.stream.size} tokens holds no document (only [SEP]s)")
        pieces = -(-lengths // body)                       # per document, ceil(length / body)
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        index = np.arange(pieces.sum()) - first            # each piece's place in its document
        doc = np.repeat(np.arange(starts.size), pieces)
        self.starts = starts[doc] + index * body            # in the stream's order
        self.lengths = np.minimum(lengths[doc] - index * body, body)
        order = np.argsort(self.lengths, kind="stable")
        self._by_length = self.starts[order]
        self.length_values, counts = np.unique(self.lengths[order], return_counts=True)
        self._offsets = np.concatenate([[0], np.cumsum(counts)])
        self._share = counts / counts.sum()

    def sample(self, batch: int, rng: np.random.Generator) -> torch.Tensor:
        """`batch` pieces of one length: the length drawn with the share of the pieces that have
        it, then the pieces uniformly (with replacement) among those."""
        which = rng.choice(self.length_values.size, p=self._share)
        lo, hi = self._offsets[which], self._offsets[which + 1]
        starts = self._by_length[rng.integers(lo, hi, size=batch)]
        return frame(_cut(self.stream, starts, int(self.length_values[which])), self.specials)

    def first(self, count: int) -> list[torch.Tensor]:
        """The first pieces of the stream that hold as many tokens as `count` windows would (at
        least one piece), so validation scores about as many tokens whatever the blocks: one
        group of blocks per length, shortest first."""
        held = np.cumsum(self.lengths)
        n = min(int(np.searchsorted(held, count * (self.seq_len - 2))) + 1, self.starts.size)
        starts, lengths = self.starts[:n], self.lengths[:n]
        return [frame(_cut(self.stream, starts[lengths == length], int(length)), self.specials)
                for length in np.unique(lengths)]


BLOCK_SOURCES = {"windows": Windows, "documents": Documents}  # the `blocks` setting's values


def block_source(kind: str, stream: np.ndarray, seq_len: int, specials: SpecialTokens) -> Windows | Documents:
    """The blocks of `stream` that the `blocks` setting `kind` names."""
    if kind not in BLOCK_SOURCES:
        raise ValueError(f"blocks={kind!r}; expected one of {list(BLOCK_SOURCES)}")
    return BLOCK_SOURCES[kind](stream, seq_len, specials)
