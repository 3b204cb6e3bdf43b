"""The mechanism tables (maskbench.report.repeated_mlm_grid, exlm_grid, effective_rank) and
their figures, built from synthetic fine-tuning outputs and analysis files in a tmp dir: cells
say "not computed" where a file is missing, the claims' rules hold on a clear case and leave a
noisy one not decided, every figure is a non-empty PNG, and the grid runs of params.yaml differ
from one another in k and p only."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from maskbench import paths
from maskbench.config.settings import PRETRAIN_OPERATIONAL
from maskbench.config import (
    ParamsError,
    grid_arms,
    grid_cell,
    read_yaml,
    resolve_profile,
    run_settings,
    schema_path,
    validate,
)
from maskbench.report import effective_rank, exlm_grid, repeated_mlm_grid
from maskbench.report.analysis import learned_cell, own_mask_gap
from maskbench.report.kinds import render
from maskbench.report.missing import Missing
from tests.helpers import declare_measure_spread, declare_pretraining_spread, figures_unwritten, validated
from tests.helpers import run as run_command

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def grid_config(raw_params):
    raw_params["verdicts"]["bootstrap"] = 200
    return validated(raw_params)


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def write_bbbp(root, run, strength, n=400, noise_seed=None):
    """Seeds 1-3 of a BBBP run: scores that separate the classes by `strength` (0: chance), and
    the summary of their ROC-AUC. Runs with the same `noise_seed` get the same predictions, on
    every seed."""
    labels = np.random.default_rng(0).integers(0, 2, n)
    values = []
    for seed in (1, 2, 3):
        rng = np.random.default_rng([noise_seed] if noise_seed is not None else [seed, *run.encode()])
        scores = rng.normal(labels * strength, 1.0)
        path = root / paths.FINETUNE_PREDICTIONS.format(run=run, task="bbbp", seed=seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"split": "test", "index": i, "prediction": float(s),
                                            "label": int(y)}) + "\n"
                                for i, (s, y) in enumerate(zip(scores, labels))))
        order = np.argsort(scores)
        ranks = np.empty(n)
        ranks[order] = np.arange(1, n + 1)
        positives = labels.sum()
        values.append((ranks[labels == 1].sum() - positives * (positives + 1) / 2) / (positives * (n - positives)))
    write_json(root / paths.FINETUNE_SUMMARY.format(run=run, task="bbbp"), {
        "value": float(np.mean(values)), "std": float(np.std(values)), "aggregate": "mean", "seeds_expected": 3,
        "seeds_missing": [], "metric": "roc_auc", "split": "test"})


UNIGRAM_LOSS = 2.3


def write_analysis(root, run, corruption=None, entropy=None, rank=None, case=None, alignment=None, unigram_gap=1.0,
                   fully_masked_gap=1.0):
    """The analysis files of `run`, and its pretraining metrics: how far its validation loss
    (`unigram_gap`) and its prediction of the entropy's fully masked tokens (`fully_masked_gap`,
    the entropy record's nll unless it gives one) end below the unigram loss."""
    write_json(root / paths.PRETRAIN_METRICS.format(run=run), {"unigram_loss": UNIGRAM_LOSS, "unigram_gap": unigram_gap,
                                                                    "valid_loss_floor": 0.0})
    if entropy is not None and entropy.get("applies"):
        entropy = {"nll": UNIGRAM_LOSS - fully_masked_gap, **entropy}
    for pattern, data in ((paths.ANALYSIS_CORRUPTION, corruption), (paths.ANALYSIS_ENTROPY, entropy),
                          (paths.ANALYSIS_RANK, rank), (paths.ANALYSIS_CASE_STUDY, case),
                          (paths.ANALYSIS_ALIGNMENT, alignment)):
        write_json(root / pattern.format(run=run), data if data is not None else {"applies": False, "why": "test"})


def grid_runs(config, table="table2"):
    return {grid_cell(config["runs"][r]): r for r in grid_arms(config, table)}


def test_layout_is_the_papers_fig4_pattern(grid_config):
    cells = repeated_mlm_grid.layout(grid_config, "table2")
    assert [(k, p) for (k, p), _ in cells] == [
        (1, 0.0225), (1, 0.15), (1, 0.387), (1, 0.622), (1, 0.789), (2, 0.15), (2, 0.387), (2, 0.622), (2, 0.789),
        (4, 0.387), (4, 0.622), (4, 0.789), (8, 0.622), (8, 0.789)]
    assert all(run is not None for _, run in cells)
    # the four diagonals of equal p^k (2.25, 15, 38.7, 62.2 %) and 78.9 % alone
    levels = {repeated_mlm_grid.corruption_level(k, p) for (k, p), _ in cells}
    assert levels == {0.022, 0.15, 0.39, 0.62, 0.79}


def test_table2_cells_and_clear_claims(tmp_path, grid_config, monkeypatch):
    """Middle diagonals learn more than the extremes; a diagonal's cells score alike; entropy
    rises with p^k: each claim holds, and every cell names its run and numbers (each run one
    pretraining seed, its recipe's declared spread small: 0.01 points of score, 0.1 bits of
    entropy, where the closest neighbouring cells are 0.76 bits apart)."""
    declare_pretraining_spread(monkeypatch, grid_config, 0.01)
    declare_measure_spread(monkeypatch, grid_config, "entropy_bits", 0.1)
    write_bbbp(tmp_path, "smiles_none", 0.0)
    strength = {0.022: 0.8, 0.15: 2.0, 0.39: 2.0, 0.62: 2.0, 0.79: 0.8}
    for (k, p), run in grid_runs(grid_config).items():
        level = repeated_mlm_grid.corruption_level(k, p)
        write_bbbp(tmp_path, run, strength[level], noise_seed=int(level * 1000))  # a diagonal shares its predictions
        share = p ** k
        write_analysis(tmp_path, run,
                       corruption={"applies": True, "k": k, "p": p, "tokens": 10000,
                                   "fully_masked": round(share * 10000),
                                   "share": share, "expected": share, "interval": [share * 0.9, share * 1.1],
                                   "within": True},
                       entropy={"applies": True, "bits": 1 + 6 * share, "std_bits": 0.5, "tokens": 5000})
    figures = tmp_path / "figures"
    figures.mkdir()
    text = render(grid_config, "table2", tmp_path, figures).markdown
    row = next(line for line in text.splitlines() if "`smiles_rmlm_k4_p62`" in line)
    assert row.startswith("| 4 | 62.2 % | 14.97 % | `smiles_rmlm_k4_p62` (repeated_mlm) | 14.97 % [13.47, 16.46] of "
                          "10,000")
    assert "paper 1.77" in row and row.endswith("| 83.2 |")  # Fig. 5 entropy and Fig. 3 MNLI beside ours
    none = json.loads((tmp_path / paths.FINETUNE_SUMMARY.format(run="smiles_none", task="bbbp")).read_text())
    assert f"| control: no pretraining (`smiles_none`) | {100 * none['value']:.1f} ± " in text  # what † compares with
    assert "| baselines | not computed |" in text.split("Controls")[1].split("Claims")[0]  # no baseline file written
    claims = [line for line in text.splitlines() if line.startswith("- ") and "Here:" in line]
    assert len(claims) == 3 and all("Here: holds" in line for line in claims), claims
    assert (f"cross-entropy on those tokens is less than {grid_config['verdicts']['learned_gap']} nats below its "
            "corpus's unigram loss did not learn" in claims[2])
    assert row.split(" | ")[6] == "1.00 (1.00)"  # below the unigram loss: fully masked tokens (validation loss)
    assert "did not learn" not in "".join(claims[:1]) or "0 did not learn" in claims[0]
    for name in ("score-bbbp.png", "corruption.png", "entropy.png", "training.png"):
        assert (figures / name).read_bytes().startswith(PNG) and f"(figures/table2/{name})" in text


def entropy_claim_line(markdown):
    return [line for line in markdown.splitlines() if line.startswith("- ") and "Here:" in line][2]


def test_entropy_claim_asks_for_learning_on_the_tokens_it_measures(tmp_path, grid_config, monkeypatch):
    """A Repeated MLM whose validation loss sits above the unigram loss while it predicts its own
    fully masked tokens well has learned (docs/notes/2026-11-24-grid-profile.md); one that predicts
    them no better than token frequencies has not, whatever its validation loss; an entropy record
    from before the nll says how to get one."""
    figures_unwritten(monkeypatch)
    declare_measure_spread(monkeypatch, grid_config, "entropy_bits", 0.1)
    cells = repeated_mlm_grid.layout(grid_config, "table2")
    for (k, p), run in cells:
        share = p ** k
        write_analysis(tmp_path, run, entropy={"applies": True, "bits": 1 + 6 * share, "std_bits": 0.5, "tokens": 5000},
                       unigram_gap=-0.3 if k == 4 else 1.0)
    rendered = render(grid_config, "table2", tmp_path, tmp_path).markdown
    row = next(line for line in rendered.splitlines() if line.startswith("| 4 | 62.2 % |"))
    assert row.split(" | ")[6] == "1.00 (-0.30)"
    claim = entropy_claim_line(rendered)
    assert "Here: holds" in claim and "0 did not learn" in claim
    write_analysis(tmp_path, "smiles_rmlm_k4_p62",
                   entropy={"applies": True, "bits": 2.0, "std_bits": 0.5, "tokens": 5000},
                   unigram_gap=1.0, fully_masked_gap=0.05)
    claim = entropy_claim_line(render(grid_config, "table2", tmp_path, tmp_path).markdown)
    assert "did not learn" in claim and "0 did not learn" not in claim
    write_json(tmp_path / paths.ANALYSIS_ENTROPY.format(run="smiles_rmlm_k4_p62"),
               {"applies": True, "bits": 2.0, "std_bits": 0.5, "tokens": 5000})
    rendered = render(grid_config, "table2", tmp_path, tmp_path).markdown
    assert ("no nll in the analysis of `smiles_rmlm_k4_p62`; "
            "re-run `maskbench analyse --run smiles_rmlm_k4_p62`") in rendered


def test_table2_noisy_claims_are_not_decided(tmp_path, grid_config, monkeypatch):
    """Every cell as good as the next within a wide noise: nothing is decided."""
    figures_unwritten(monkeypatch)
    write_bbbp(tmp_path, "smiles_none", 0.0, n=40)
    for (k, p), run in grid_runs(grid_config).items():
        write_bbbp(tmp_path, run, 0.2, n=40)
        write_analysis(tmp_path, run, entropy={"applies": True, "bits": 3.0 + 0.01 * k, "std_bits": 2.0, "tokens": 50})
    text = render(grid_config, "table2", tmp_path, tmp_path).markdown
    claims = [line for line in text.splitlines() if line.startswith("- ") and "Here:" in line]
    assert all("Here: not decided" in line for line in claims), claims
    assert "does not apply (test)" in text  # corruption.json that does not apply says why


def test_table2_says_not_computed_for_missing_files(tmp_path, grid_config):
    text = render(grid_config, "table2", tmp_path, tmp_path).markdown
    assert "| control: no pretraining (`smiles_none`) | not computed" in text
    assert "not computed (no runs/analysis/smiles_mlm_p2/corruption.json)" in text
    assert "Here: not computed" in text
    for name in ("score-bbbp.png", "corruption.png", "entropy.png", "training.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_table3_rows_claims_and_figures(tmp_path, grid_config):
    write_bbbp(tmp_path, "smiles_none", 0.0)
    states = [{"masked_index": i, "clone": c, "top3": [["C", 0.5], ["O", 0.3], ["N", 0.1]]} for i in (1, 2)
              for c in (1, 2)]
    for (k, p), run in grid_runs(grid_config, "table3").items():
        write_bbbp(tmp_path, run, 1.0 if k == 1 else 2.5)
        case = {"applies": True, "text": "CC(=O)O", "tokens": ["C", "[MASK]", "(", "=", "[MASK]", ")", "O"],
                "states": states, "transitions": (np.eye(4, k=1) + 0.25 * np.triu(np.ones((4, 4)), 1)).tolist(),
                "best_path": [0, 2], "decoded": ["C", "O"]}
        aligned = {"applies": True, "own_posterior": 0.3 + k / 100, "even_share": 0.11, "own_log_prob": -2.0,
                   "other_log_prob": -2.5, "dag_nll": UNIGRAM_LOSS - k / 5, "transition_floor": 0.0}
        write_analysis(tmp_path, run, entropy={"applies": True, "bits": 4 - k / 4 + p, "std_bits": 1, "tokens": 900},
                       case=case if run == "smiles_exlm_k4_p15" else None, alignment=aligned if k > 1 else None,
                       unigram_gap=0.5 + k / 10)
    text = render(grid_config, "table3", tmp_path, tmp_path).markdown
    assert "| 38.7 % | ExLM k = 4 | `smiles_exlm_k4_p39` |" in text
    [k4] = [line for line in text.splitlines() if line.startswith("| 38.7 % | ExLM k = 4 |")]
    # each row's gap below the unigram loss on its own masks (ExLM: the DAG's), then its validation loss's
    assert "| 0.34 (even: 0.11); -2.00 / -2.50 nats | 0.80 (0.90) |" in k4
    [mlm] = [line for line in text.splitlines() if line.startswith("| 38.7 % | MLM |")]
    assert mlm.endswith("| — | 1.00 (0.60) | — |")  # MLM: the entropy's tokens; no alignment, no claim of its own
    (tmp_path / paths.PRETRAIN_METRICS.format(run="smiles_exlm_k8_p39")).unlink()
    [k8] = [line for line in render(grid_config, "table3", tmp_path, tmp_path).markdown.splitlines()
            if line.startswith("| 38.7 % | ExLM k = 8 |")]
    assert "| not computed (no runs/pretrain/smiles_exlm_k8_p39/metrics.json) |" in k8
    assert "| control: no pretraining (`smiles_none`) | 50." in text  # strength 0: chance
    claims = [line for line in text.splitlines() if line.startswith("- ExLM with k states")]
    assert len(claims) == 6 and all("Here: holds" in line for line in claims), claims
    for name in ("entropy.png", "case_study.png", "training.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG)


def rank_file(with_mask, without, real_with_mask=None, mask=None, finetuned=None):
    """An effective_rank.json: the paper's matrices `with_mask` (real and [MASK] states) and
    `without`, the real-token variant (`real_with_mask`, MAE-LM's `with_mask` by default) and `mask`."""
    real_with_mask = with_mask if real_with_mask is None else real_with_mask
    return {"applies": True, "threshold": 0.9, "rows": 2048, "finetuned": finetuned,
            "layers": [{"layer": i, "with_mask": w, "real_with_mask": r, "real_without_mask": wo,
                        "mask": None if mask is None else mask[i]}
                       for i, (w, r, wo) in enumerate(zip(with_mask, real_with_mask, without))]}


def test_table6_decides_the_gap_by_its_rule(tmp_path, grid_config, monkeypatch):
    """The paper's gap (MLM's real and [MASK] states against its states without [MASK]) is 10,
    15, 20 on layers 1-3; the real-token variant's is 0, 1, 0. MAE-LM within the margin (2) of
    MLM's with-[MASK] rank closes the paper's gap; the variant has no gap to close."""
    write_analysis(tmp_path, "smiles_mlm", rank=rank_file([40, 60, 70, 80], [40, 50, 55, 60],
                                                          real_with_mask=[40, 50, 56, 60], mask=[1, 5, 9, 12]))
    write_analysis(tmp_path, "smiles_mae_lm", rank=rank_file([40, 58, 68, 78], [40, 59, 69, 79]))
    text = render(grid_config, "table6", tmp_path, tmp_path).markdown
    header = next(line for line in text.splitlines() if line.startswith("| layer |"))
    assert header.startswith("| layer | `smiles_mlm`: input with [MASK], real and [MASK] tokens (MAE-LM §2) | "
                             "`smiles_mlm`: input without [MASK] (MAE-LM §2) | `smiles_mlm`: real tokens only, input "
                             "with [MASK] (this project's variant) | `smiles_mlm`: [MASK] tokens |")
    assert "| 2 | 70 | 55 | 56 | 9 | 68 | 69 | 68 |" in text
    assert "not computed (no runs/analysis/smiles_exlm/effective_rank.json)" in text
    paper, variant = [line for line in text.splitlines() if line.startswith("- MAE-LM closes the gap")]
    assert "MAE-LM §2's matrices" in paper and "Here: holds: closed on 3, left on 0 of 3 layers with a gap" in paper
    assert "this project's variant" in variant and "Here: not decided: MLM (`smiles_mlm`) shows no gap" in variant
    assert (tmp_path / "rank.png").read_bytes().startswith(PNG)
    figures_unwritten(monkeypatch)  # the rest is about the verdicts
    # the same ranks for MAE-LM as MLM's without [MASK]: the gap is left
    write_analysis(tmp_path, "smiles_mae_lm", rank=rank_file([40, 51, 54, 61], [40, 51, 54, 61]))
    assert "Here: does not hold: closed on 0, left on 3" in render(grid_config, "table6", tmp_path, tmp_path).markdown
    # gaps within 2 x rank_margin are noise: nothing to close
    write_analysis(tmp_path, "smiles_mlm", rank=rank_file([40, 52, 53, 54], [40, 50, 51, 51]))
    verdicts = render(grid_config, "table6", tmp_path, tmp_path).verdicts
    assert all(v.text.startswith("not decided: MLM (`smiles_mlm`) shows no gap") for v in verdicts)
    # a record written before the paper's matrix was measured says so
    old = rank_file([40, 60, 70, 80], [40, 50, 55, 60])
    for layer in old["layers"]:
        del layer["with_mask"]
    write_analysis(tmp_path, "smiles_mlm", rank=old)
    paper, variant = render(grid_config, "table6", tmp_path, tmp_path).verdicts
    assert paper.text.startswith("not computed: `smiles_mlm`'s effective_rank.json has no `with_mask` ranks")
    assert variant.text.startswith("does not hold")  # the variant still decides (MAE-LM as above: leaves it)


def test_effective_rank_lists_finetuned_ranks(grid_config):
    found = {"smiles_mlm": rank_file([3], [2], finetuned={"task": "bbbp", "seed": 1,
                                                         "layers": [{"layer": 0, "real_without_mask": 7}]}),
             "smiles_mae_lm": Missing("not computed (no file)")}
    lines = effective_rank.finetuned_lines(found)
    assert "- `smiles_mlm` on `bbbp` (seed 1), rank by layer: 0: 7" in lines
    assert "- `smiles_mae_lm`: not computed (no file)" in lines


def test_table2_says_what_outside_means_and_where_entropy_is_capped(raw_params):
    """The SMILES grid's entropies (capped by a vocabulary of a few dozen tokens near 5.3 bits)
    beside Fig. 5's text ones (up to 7.26 bits): the table says why they differ; on text the
    ceiling is the profile's tokenizer's, log2 of its size."""
    grid = validated(dict(raw_params, profile="grid"))
    runs = grid["tables"]["table2"]["runs"]
    outside, entropy = repeated_mlm_grid.scale_lines(grid, runs)
    assert "**outside**" in outside and "Binomial(tokens, p^k)" in outside
    assert repeated_mlm_grid.SMILES_CEILING in entropy and "up to 7.26 bits" in entropy
    paper = validated(dict(raw_params, profile="paper"))
    _, text = repeated_mlm_grid.scale_lines(paper, paper["tables"]["table2"]["runs"])
    assert "log2 32,768 = 15.0 bits for this profile's text tokenizer" in text
    assert repeated_mlm_grid.SMILES_CEILING not in text


def test_corruption_cell_flags_a_share_outside_its_interval():
    found = {"share": 0.05, "interval": [0.02, 0.025], "tokens": 1000, "within": False}
    assert repeated_mlm_grid.corruption_cell(found) == "5.00 % [2.00, 2.50] of 1,000 tokens, **outside** p^k's interval"
    assert exlm_grid.rows  # the module's layout is importable without torch


def settings_that_decide(config: dict, run: str) -> dict:
    """A run's pretraining settings but the operational ones (a micro-batch that fits the GPU)."""
    return {k: v for k, v in run_settings(config, run).items() if k not in PRETRAIN_OPERATIONAL}


@pytest.mark.parametrize("profile", ["tiny", "grid", "paper"])
def test_grid_runs_differ_from_their_base_only_in_k_and_p(raw_params, profile):
    config = resolve_profile(raw_params, profile)
    for table in ("table2", "table3"):
        arms = grid_arms(config, table)
        base = {o: next(r for r in arms if config["runs"][r]["objective"] == o) for o in ("mlm", "repeated_mlm", "exlm")
                if any(config["runs"][r]["objective"] == o for r in arms)}
        for run in arms:
            spec, first = config["runs"][run], config["runs"][base[config["runs"][run]["objective"]]]
            assert settings_that_decide(config, run) == settings_that_decide(config, arms[0]), (profile, run)
            assert spec["modality"] == config["runs"][arms[0]]["modality"]
            assert ({key: v for key, v in spec["knobs"].items() if key not in ("k", "mask_ratio")}
                    == {key: v for key, v in first["knobs"].items() if key not in ("k", "mask_ratio")}), (profile, run)
        assert len({grid_cell(config["runs"][r]) for r in arms}) == len(arms)


def test_validation_refuses_a_grid_arm_that_differs_in_more_than_k_and_p(raw_params):
    schema = read_yaml(schema_path())
    raw_params["runs"]["smiles_rmlm_k4_p62"]["overrides"]["steps"] = 10
    with pytest.raises(ParamsError, match="smiles_rmlm_k4_p62 differs from smiles_mlm_p2 in \\['steps'\\]"):
        validate(raw_params, schema)
    raw_params["runs"]["smiles_rmlm_k4_p62"] = dict(raw_params["runs"]["smiles_rmlm_k4_p39"])
    with pytest.raises(ParamsError, match="fills the cell"):
        validate(raw_params, schema)



def test_validation_refuses_grid_arms_of_one_objective_with_other_knobs(raw_params):
    raw_params["runs"]["smiles_exlm_k4_p15"]["knobs"]["transitions"] = "sparse"
    with pytest.raises(ParamsError, match=r"smiles_exlm_k4_p15 differs from \S+ in \['knobs.transitions'\] besides k"):
        validate(raw_params, read_yaml(schema_path()))


def test_validation_refuses_a_case_study_that_is_not_an_exlm_run(raw_params):
    raw_params["tables"]["table3"]["case_study"] = "smiles_mlm"
    with pytest.raises(ParamsError, match="case_study: 'smiles_mlm' is not an exlm run"):
        validate(raw_params, read_yaml(schema_path()))


def test_entropy_claim_uses_the_standard_errors(grid_config, monkeypatch):
    """The tokens' share of the noise, with a declared pretraining spread of zero (the pretraining
    spread's share: tests/test_measure_claims.py)."""
    declare_measure_spread(monkeypatch, grid_config, "entropy_bits", 0.0)
    a, b = "smiles_mlm", "smiles_mlm_p39"
    cells = [((1, 0.15), a), ((1, 0.387), b)]
    clear = {a: {"entropy": {"bits": 1.0, "std_bits": 1.0, "tokens": 10000}},
             b: {"entropy": {"bits": 1.2, "std_bits": 1.0, "tokens": 10000}}}
    learned = {a: 1.0, b: 1.0}
    assert repeated_mlm_grid.entropy_claim(grid_config, cells, clear, learned).startswith("holds: 1 rises, 0 falls")
    # a run at the unigram plateau: its entropy says nothing about corruption
    plateau = {a: 1.0, b: 0.05}
    assert repeated_mlm_grid.entropy_claim(grid_config, cells, clear, plateau).startswith(
        "not decided: 0 rises, 0 falls; decided on 0 of 1 pairs of neighbouring cells (0 not decided, 1 did not learn)")
    assert "not computed" in repeated_mlm_grid.entropy_claim(grid_config, cells, clear,
                                                             {a: 1.0, b: Missing("no metrics")})
    clear[b]["entropy"]["tokens"] = clear[a]["entropy"]["tokens"] = 100  # 0.2 bits < 1.96 x 0.14
    assert repeated_mlm_grid.entropy_claim(grid_config, cells, clear, learned).startswith("not decided")
    assert math.isclose(repeated_mlm_grid.corruption_level(4, 0.387), 0.022)


@pytest.mark.slow
@pytest.mark.parametrize("profile, pretrain, finetune", [("grid", 22, 42 + 1), ("paper", 24, 21 * 4 * 3 + 3)])
def test_tables_2_3_6_dry_run(workdir, profile, pretrain, finetune):
    """`snakemake -n` plans the three tables under the grid and paper profiles: each grid arm
    (and `none`, and MAE-LM for table6) pretrained once, analysed, fine-tuned per seed; and the
    fine-tunings whose encoders table6's rank after fine-tuning reads that tables 2 and 3 do not
    have (grid: MAE-LM on BBBP; paper: its three runs on Rotten Tomatoes), seed 1."""
    params = workdir / "params.yaml"
    params.write_text(params.read_text().replace("\nprofile: tiny\n", f"\nprofile: {profile}\n", 1))
    out = run_command(["snakemake", "-n", "--cores", "all", "reports/table2.md", "reports/table3.md",
                       "reports/table6.md"],
              workdir)
    counts = {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", out, re.MULTILINE)}
    # the fine-tunings that keep the encoder table6's rank after fine-tuning reads have rules of their own
    finetunes = sum(n for rule, n in counts.items() if rule == "finetune" or rule.startswith("finetune_"))
    assert (counts["pretrain"], finetunes, counts["report"]) == (pretrain, finetune, 3), out[-2000:]


def test_a_dags_own_mask_gap_adds_back_what_its_transitions_alone_cost():
    """ExLM's DAG loss on its own masks is read against the unigram loss plus its transition
    floor (a token-frequency emitter scores both); a record without the floor (older code) is
    refused, not read as 0, and a token-per-position measure never has one."""
    metrics = {"unigram_loss": 2.3, "unigram_gap": -0.8, "valid_loss_floor": 1.2}
    assert own_mask_gap("r", {"dag_nll": 3.1, "transition_floor": 1.2}, metrics, field="dag_nll") == pytest.approx(0.4)
    assert "no transition_floor" in str(own_mask_gap("r", {"dag_nll": 2.1}, metrics, field="dag_nll"))
    assert own_mask_gap("r", {"nll": 2.0, "transition_floor": 1.2}, metrics) == pytest.approx(0.3)
    assert learned_cell(0.4, metrics) == "0.40 (0.40)"  # the validation loss read the same way
