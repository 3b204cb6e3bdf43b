"""Pretraining seeds (`pretrain.seeds`): each run pretrained once per seed under its own name,
every seed fine-tuned and probed, verdicts that resample pretraining seeds before fine-tuning
seeds (the Multi-Bootstrap), and tables that show the spread across pretraining seeds."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from maskbench.config import ParamsError, pretraining_runs, lookup, read_yaml, run_settings, schema_path, validate
from maskbench.eval.aggregate import over_pretraining_seeds
from maskbench.eval.verdict import A_BETTER, UNDECIDED, compare, draw_examples, headline_score, resampled_scores
from maskbench.report.cells import cell, learning_cell, read_summaries
from maskbench.report.evidence import TaskEvidence
from maskbench.report.missing import Missing
from maskbench.stages import STAGES

N = 2000
LABELS = np.random.default_rng(0).integers(0, 2, N)
INDICES = draw_examples(N, resamples=1000, seed=0)
SCORE = headline_score("accuracy", LABELS)


def seed_outputs(accuracy: float, seed: int) -> np.ndarray:
    """Two-class probabilities right on a fraction `accuracy` of the examples."""
    right = np.random.default_rng(seed).random(N) < accuracy
    return np.eye(2)[np.where(right, LABELS, 1 - LABELS)] * 0.8 + 0.1


def hierarchical_arm(centres: list[float], first_seed: int) -> np.ndarray:
    """(pretraining seeds, 3 fine-tuning seeds, 1 + resamples): each pretraining seed's three
    fine-tuning seeds within half a point of its centre."""
    return np.stack([resampled_scores(SCORE, [seed_outputs(c + d, first_seed + 10 * i + j)
                                              for j, d in enumerate((-0.005, 0.0, 0.005))], INDICES)
                     for i, c in enumerate(centres)])


def test_disagreeing_pretraining_seeds_leave_undecided_what_one_level_decides():
    """A's pretraining seeds land at 86, 72 and 79 %, B's at 70, 78 and 71: A is ahead by 6.5
    points on average, but one of B's seeds beats one of A's. Pooling the nine runs as if they
    were fine-tuning seeds of one encoder (one level) decides A better; resampling pretraining
    seeds first does not. On the first pretraining seed alone (what a one-seed profile sees)
    A wins by 15 points."""
    a, b = hierarchical_arm([0.86, 0.72, 0.79], 100), hierarchical_arm([0.70, 0.78, 0.71], 200)
    two_level = compare(a, b, True, 0.95, 0)
    pooled = compare(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), True, 0.95, 0)
    first = compare(a[0], b[0], True, 0.95, 0)
    assert two_level.outcome == UNDECIDED and two_level.low < 0 < two_level.high
    assert pooled.outcome == A_BETTER and first.outcome == A_BETTER
    assert two_level.difference == pytest.approx(pooled.difference)  # same centre, wider interval
    assert two_level.noise == ("pretraining seeds (3), each with the mean of its fine-tuning seeds (3), "
                               "and test examples")
    assert first.noise == "fine-tuning seeds (3) and test examples; conditional on one pretraining run per arm"


def test_one_pretraining_seed_draws_exactly_as_the_one_level_bootstrap():
    a, b = hierarchical_arm([0.80], 1), hierarchical_arm([0.78], 2)
    assert compare(a, b, True, 0.95, 3) == compare(a[0], b[0], True, 0.95, 3)


def test_a_fixed_baseline_has_no_seed_noise():
    a, baseline = hierarchical_arm([0.80, 0.75], 1), resampled_scores(SCORE, [seed_outputs(0.5, 9)], INDICES)
    assert compare(a, baseline, True, 0.95, 0).noise == (
        "pretraining seeds (2), each with the mean of its fine-tuning seeds (3), and test examples")
    assert compare(baseline, baseline, True, 0.95, 0).noise == (
        "test examples; conditional on one pretraining run per arm")


def with_seeds(raw_params: dict, seeds: list[int]) -> dict:
    raw = copy.deepcopy(raw_params)
    raw["pretrain"]["seeds"] = seeds
    return raw


def validated(raw_params: dict, seeds: list[int]) -> dict:
    return validate(with_seeds(raw_params, seeds), read_yaml(schema_path()))


def test_each_seed_is_a_run_of_its_own_and_adding_one_retrains_nothing(raw_params):
    one, three = validated(raw_params, [0]), validated(raw_params, [0, 1, 2])
    assert pretraining_runs(three, "mlm") == ["mlm", "mlm-pseed1", "mlm-pseed2"]
    assert run_settings(three, "mlm-pseed2")["seed"] == 2 and run_settings(three, "mlm")["seed"] == 0
    assert "seeds" not in run_settings(three, "mlm")
    assert three["runs"]["mlm-pseed1"]["objective"] == "mlm" and three["tables"] == one["tables"]
    pretrain, finetune = STAGES["pretrain"], STAGES["finetune"]
    jobs = {w["run"] for w in pretrain.jobs(three)}
    assert {"mlm", "mlm-pseed1", "mlm-pseed2", "none-pseed2"} <= jobs and len(jobs) == 3 * len(pretrain.jobs(one))
    # the run's seed-0 job reads the same values whatever the other seeds are: nothing re-runs
    reads = [{key: json.dumps(lookup(c, key)) for key in pretrain.params(c, {"run": "mlm"})} for c in (one, three)]
    assert reads[0] == reads[1] and "pretrain.seeds" not in pretrain.params(three, {"run": "mlm-pseed1"})
    assert "runs.mlm.knobs" in pretrain.params(three, {"run": "mlm-pseed1"})
    tuned = {(w["run"], w["task"], w["seed"]) for w in finetune.jobs(three)}
    assert {("mlm-pseed1", "word_order", 1), ("smiles_mlm-pseed2", "bbbp", 3)} <= tuned
    assert len(tuned) == 3 * len(finetune.jobs(one))


def test_each_pretraining_seed_is_analysed_so_a_measures_spread_is_built_by_the_workflow(raw_params):
    """The analyses and generation perplexities run on every pretraining seed (`snakemake --cores
    all analysed`, or one seed's outputs as a target): the tables read seed 0, the other seeds
    measure the spread noise.yaml `measures` declares. A seed instance is in no table, so its
    analysis reads no fine-tuned encoder; seed 0's inputs are the same at any seed count."""
    one, three = validated(raw_params, [0]), validated(raw_params, [0, 1, 2])
    analyse, perplexity = STAGES["analyse"], STAGES["perplexity"]
    assert {w["run"] for w in analyse.jobs(three)} == {w["run"] for w in STAGES["pretrain"].jobs(three)}
    assert len(analyse.jobs(three)) == 3 * len(analyse.jobs(one))
    assert analyse.inputs(three, {"run": "mlm"}) == analyse.inputs(one, {"run": "mlm"})
    assert "encoder" not in analyse.inputs(three, {"run": "mlm-pseed1"})
    measured = {w["run"] for w in perplexity.jobs(three)}
    assert {"mlm-pseed1", "mlm-pseed2"} <= measured and len(measured) == 3 * len(perplexity.jobs(one))


def test_seeds_without_zero_or_a_run_named_like_a_seed_are_refused(raw_params):
    with pytest.raises(ParamsError, match="pretrain.seeds"):
        validated(raw_params, [1, 2])
    raw_params["runs"]["mlm-pseed3"] = raw_params["runs"]["mlm"]
    with pytest.raises(ParamsError, match="runs.mlm-pseed3: a name with '-pseed' is kept for pretraining seeds"):
        validated(raw_params, [0])


def summary(run: str, value: float, std: float, scores: dict) -> dict:
    return {"run": run, "task": "t", "metric": "accuracy", "split": "test", "aggregate": "median", "value": value,
            "std": std, "scores": scores, "extra": {}, "also_report": {}, "seeds_expected": 2, "seeds_missing": []}


def test_pretraining_seeds_combine_into_one_cell_with_their_spread():
    """Centres 0.80, 0.70 and 0.75 (fine-tuning stds 0.03, 0.04, 0.0): mean 0.75, pooled
    fine-tuning std sqrt((9 + 16 + 0) / 3) / 100, pretraining std 0.05."""
    found = {"mlm": summary("mlm", 0.80, 0.03, {"1": 0.79, "2": 0.81}),
             "mlm-pseed1": summary("mlm-pseed1", 0.70, 0.04, {"1": 0.68, "2": 0.72}),
             "mlm-pseed2": summary("mlm-pseed2", 0.75, 0.0, {"1": 0.75, "2": 0.75})}
    combined = over_pretraining_seeds(found)
    assert combined["value"] == pytest.approx(0.75) and combined["std"] == pytest.approx(math.sqrt(25 / 3) / 100)
    assert combined["pretraining"]["std"] == pytest.approx(0.05) and combined["seeds_expected"] == 6
    assert combined["scores"]["mlm-pseed1/2"] == 0.72
    assert cell(combined, True) == "75.0 ± 2.9 [pretraining ± 5.0, 3 seeds]"
    assert over_pretraining_seeds({"mlm": found["mlm"]}) == found["mlm"]


def test_a_missing_pretraining_seed_is_named_not_hidden(tmp_path, raw_params):
    config = validated(raw_params, [0, 1])
    path = tmp_path / "runs/finetune/mlm/word_order/summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary("mlm", 0.8, 0.01, {"1": 0.8})))
    found = read_summaries(config, tmp_path, [("mlm", "word_order"), ("exlm", "word_order")])
    assert list(found) == [("mlm", "word_order")]
    assert cell(found["mlm", "word_order"], True) == "80.0 ± 1.0 (pretraining seeds not computed: mlm-pseed1)"
    for run, gap in (("mlm", 0.85), ("mlm-pseed1", 0.05)):
        metrics = tmp_path / f"runs/pretrain/{run}/metrics.json"
        metrics.parent.mkdir(parents=True)
        metrics.write_text(json.dumps({"unigram_gap": gap, "valid_loss_floor": 0.0}))
    assert learning_cell(config, tmp_path, "mlm") == "0.45 (0.05 to 0.85) (plateau: 1 of 2 seeds)"
    evidence = TaskEvidence(config, "word_order", tmp_path)
    arm = evidence.arm("mlm")
    assert isinstance(arm, Missing) and "no predictions of seed" in arm.why
