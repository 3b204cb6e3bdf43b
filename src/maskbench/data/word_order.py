"""Word order: a text task generated from WikiText-2's test split that only a model of word order solves.

Why it exists: at the default profile's scale (6M tokens of WikiText-2) no offline sentiment
task tells a pretrained text encoder from a random one
(docs/notes/2026-11-24-tasks-a-small-encoder-can-learn.md), so table1 could not show whether
text pretraining taught anything. What a masked language model learns first is which words
follow which; this task asks exactly that.

Each row is a sentence of the corpus's test split (never read in pretraining, whose blocks come
from train and valid) either as written (label 1, `natural`) or with its interior words shuffled
(label 0, `shuffled`). The first and last word stay in place, so both classes share the bag of
words, the capitalised first word and the final full stop: only the order tells them apart, and
a bag-of-words model is at chance by construction. It is an acceptability judgement in the
spirit of GLUE's CoLA, generated, and the reports never call it CoLA.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import numpy as np

LABEL_NAMES = ["shuffled", "natural"]  # label order: 0 = interior words shuffled, 1 = as written
_TITLE = re.compile(r"^ *=.*= *$")  # WikiText section and article titles: " = Title = ", " = = Part = = "
_SENTENCE_END = " . "


def wikitext_sentences(lines: Iterable[str], min_words: int, max_words: int) -> tuple[list[list[str]], Counter]:
    """The sentences of WikiText raw lines as word lists, titles left out, full stops dropped.

    WikiText's raw text is already tokenized with spaces around punctuation, so a sentence ends
    at " . " and its words are its space-separated tokens. Sentences outside
    [min_words, max_words] are counted per reason, as is a sentence whose interior words are all
    the same (no shuffle can change it)."""
    sentences, skipped = [], Counter()
    for line in lines:
        if not line.strip() or _TITLE.match(line):
            continue
        for text in f" {line.strip()} ".split(_SENTENCE_END):
            words = text.split()
            if not words:
                continue
            if len(words) < min_words:
                skipped["sentence_too_short"] += 1
            elif len(words) > max_words:
                skipped["sentence_too_long"] += 1
            elif len(set(words[1:-1])) < 2:
                skipped["interior_words_all_equal"] += 1
            else:
                sentences.append(words)
    return sentences, skipped


def shuffle_interior(words: list[str], rng: np.random.Generator) -> list[str]:
    """`words` with every word but the first and the last permuted, and never left as it was."""
    interior = words[1:-1]
    if len(set(interior)) < 2:
        raise ValueError(f"cannot shuffle {' '.join(words)!r}: its interior words are all the same")
    while True:
        shuffled = [interior[i] for i in rng.permutation(len(interior))]
        if shuffled != interior:
            return [words[0], *shuffled, words[-1]]


def word_order_rows(sentences: list[list[str]], examples: int, seed: int, where: str) -> list[dict]:
    """`examples` text-classification rows: a seeded draw of sentences, every other one shuffled.

    Labels alternate in the draw's order, so the classes are balanced (±1) and a sentence appears
    once, in one class only. Each row ends with " ." as the corpus writes a sentence."""
    if len(sentences) < examples:
        raise ValueError(f"{where}: {examples} examples asked for, but only {len(sentences)} sentences qualify; "
                         "lower `examples` or widen min_words/max_words")
    rng = np.random.Generator(np.random.PCG64(seed))
    drawn = rng.permutation(len(sentences))[:examples]
    rows = []
    for position, index in enumerate(drawn):
        natural = position % 2 == 0
        words = sentences[index] if natural else shuffle_interior(sentences[index], rng)
        rows.append({"text": " ".join(words) + " .", "text_pair": None, "label": int(natural)})
    return rows
