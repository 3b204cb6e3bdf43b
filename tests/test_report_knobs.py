"""Every table says what distinguishes a variant row: its objective's knobs in words
(`maskbench.report.knobs`), defaults included, and table3 marks the own-state posterior that a
sparse DAG forces."""

from __future__ import annotations

import pytest

from maskbench.config import table_kind
from maskbench.report.exlm_grid import BY_CONSTRUCTION, alignment_cell, sparse_dag
from maskbench.report.kinds import KINDS
from maskbench.report.knobs import knobs_text
from tests.helpers import validated


def profile(raw_params, name: str) -> dict:
    return validated(dict(raw_params, profile=name))


def test_an_exlm_variant_reads_as_one(raw_params):
    tiny = profile(raw_params, "tiny")
    text = knobs_text(tiny, "exlm")   # the text arm: k = 2, sparse DAG, detached transitions + slot
    assert text.startswith("k = 2; p = 15 %; 2-D RoPE; sparse DAG; transitions from detached states + slot embedding")
    assert "dense DAG" in knobs_text(tiny, "smiles_exlm") and "no 2-D RoPE" in knobs_text(tiny, "smiles_exlm_no_rope2d")
    assert "transition heads: one per encoder head" in knobs_text(tiny, "smiles_exlm_gated")
    assert knobs_text(tiny, "mae_lm") == "p = 15 %; 1-layer decoder; δ = 0"
    assert knobs_text(tiny, "smiles_mae_lm_misaligned").endswith("misaligned positions")
    assert knobs_text(tiny, "varlen_mlm") == "p uniform in [15 %, 30 %]" and knobs_text(tiny, "none") == "—"
    assert knobs_text(tiny, "smiles_exlm_k4_p39", leave_out=("k", "mask_ratio")).startswith("2-D RoPE; dense DAG")


def test_the_paper_profile_says_each_runs_block_norm(raw_params):
    paper = profile(raw_params, "paper")
    assert knobs_text(paper, "exlm").endswith("; pre-LN") and knobs_text(paper, "mlm") == "p = 15 %; post-LN"
    assert knobs_text(paper, "mae_lm") == "p = 15 %; 4-layer decoder; δ = 0; decoder input LayerNorm; post-LN"
    # every ExLM of the paper's tables says what its transitions read
    for table in ("table1", "table3", "table5"):
        for run in paper["tables"][table]["runs"]:
            if paper["runs"][run]["objective"] == "exlm":
                assert "transitions from" in knobs_text(paper, run) or "no DAG" in knobs_text(paper, run), run


ALIGNED = {"own_posterior": 1.0, "even_share": 0.11, "own_log_prob": -1.5, "other_log_prob": -3.2}


def test_table3_marks_the_own_state_posterior_a_sparse_dag_forces(raw_params):
    grid, tiny = profile(raw_params, "grid"), profile(raw_params, "tiny")
    assert sparse_dag(grid, "smiles_exlm_k4_p15") and not sparse_dag(tiny, "smiles_exlm_k4_p15")
    assert not sparse_dag(grid, "smiles_mlm")
    assert alignment_cell(ALIGNED, by_construction=True).startswith(f"1.00 {BY_CONSTRUCTION} (even: 0.11)")
    assert BY_CONSTRUCTION not in alignment_cell(ALIGNED, by_construction=False)


@pytest.mark.parametrize("name", ["tiny", "grid", "paper"])
def test_every_table_row_shows_its_runs_knobs(raw_params, tmp_path, name):
    """Rendered with nothing computed: every run of every table is shown with its knobs (a grid
    table without the k and p its layout shows), and table3 explains the by-construction mark."""
    config = profile(raw_params, name)
    for table in config["tables"]:
        kind = table_kind(config, table)
        text = KINDS[kind].render(config, table, tmp_path, None).markdown
        if kind == "repeated_mlm_grid":   # its rows are (k, p) and nothing else differs
            continue
        for run in config["tables"][table]["runs"]:
            if config["runs"][run]["objective"] == "none":
                continue
            leave_out = ("k", "mask_ratio") if kind == "exlm_grid" else ()
            assert knobs_text(config, run, leave_out) in text, (name, table, run)
        if kind == "exlm_grid":
            assert f"Own-state posterior {BY_CONSTRUCTION}: holds by construction" in text
