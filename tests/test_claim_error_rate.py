"""The whole claim path under the null: builds of two equal recipes, at the shapes of the
`tiny-3seeds`, `gpu-day` and `paper` profiles (table1's tasks, pretraining and fine-tuning seeds,
test sizes), rendered through the code that renders a claim (`report.published.verdict`: the
`none` pre-filter, the claim's parts, Holm, the family verdict), must be decided no more often
than the nominal 1 - confidence, within the Monte-Carlo error; and the rule without the few-seed
correction, or without the declared pretraining spread, must be caught deciding too often.

Each simulated build gives every (pretraining seed, fine-tuning seed) of an arm its
`resampled_scores` directly: a pretraining shift shared by every task of the seed (sd `SD_P` on
each task, correlation 1: the reading the rule takes), a fine-tuning shift, and the examples'
share, the bootstrap's draws emulated as Gaussian deviations (a part shared by every seed of
the task, the pairing, and one of each seed's own) at the profile's test sizes. noise.yaml
declares `SD_P` for every task, measured on `DECLARED_SEEDS` seeds, so the rule sees the truth.
Measured rates: docs/verdicts.md "The rule's error rates"."""

from __future__ import annotations

import math

import numpy as np
import pytest

from maskbench.config import pretraining_runs, task_seeds
from maskbench.eval import verdict as rule
from maskbench.power import declared_spread, scored_examples
from maskbench.report.evidence import TaskEvidence
from maskbench.report.published import Verdict, claim_of, claim_runs, control_run, verdict
from tests.helpers import config_with_profile, declare_pretraining_spread, few_seed_correction_dropped

NOMINAL, RESAMPLES = 0.05, 200
SD_P, SD_F, SD_E, RHO = 0.04, 0.005, 0.4, 0.5   # score units: pretraining 4 points (word_order measured 3.7)
DECLARED_SEEDS = 25
SHAPES = [("tiny-3seeds", "exlm_beats_mlm_smiles"), ("gpu-day", "exlm_beats_mlm_text"),
          ("paper", "exlm_beats_mlm_text")]


def tolerance(replicates: int) -> float:
    """2.5 Monte-Carlo standard errors of a rate at the nominal."""
    return 2.5 * math.sqrt(NOMINAL * (1 - NOMINAL) / replicates)


def _arm(rng, luck: np.ndarray, paired: np.ndarray, tuned: int, centre: float, n: int):
    """(pretraining seeds, fine-tuning seeds, 1 + RESAMPLES) scores of one arm on one task: `luck`,
    each pretraining seed's shift in sds (zeros: no pretraining), `paired`, the examples' draws'
    deviation shared by every seed of every arm of the task."""
    own = SD_E * math.sqrt((1 - RHO) / n)
    shift = SD_P * luck[:, None] + rng.normal(0, SD_F, (len(luck), tuned))
    observed = centre + shift + rng.normal(0, own, (len(luck), tuned))
    drawn = paired + rng.normal(0, own, (len(luck), tuned, RESAMPLES))
    return np.concatenate([observed[..., None], observed[..., None] + drawn], axis=-1)


def _decided_rate(raw_params, monkeypatch, tmp_path, profile: str, claim_id: str, replicates: int) -> float:
    """How often the claim between equal recipes is decided (any part, either way)."""
    config = config_with_profile(raw_params, profile)
    declare_pretraining_spread(monkeypatch, config, 100 * SD_P, DECLARED_SEEDS)
    claim = claim_of(claim_id)
    (better,), (than,) = claim_runs(config, "table1", claim)
    tasks = [t for t in config["tables"]["table1"]["tasks"] if config["tasks"][t]["modality"] == claim["modality"]]
    none = control_run(config, "table1", claim["modality"])
    pretrained = {run: len(pretraining_runs(config, run)) for run in (better, than)}  # may differ (gpu-day)
    rng = np.random.default_rng([len(profile), replicates])
    decided = 0
    for _ in range(replicates):
        shared = {run: rng.normal(size=n) for run, n in pretrained.items()}   # each run's pretraining luck
        evidence = {}
        for task in tasks:
            n, tuned = scored_examples(config, task), len(task_seeds(config, task))
            paired = rng.normal(0, SD_E * math.sqrt(RHO / n), RESAMPLES)
            found = evidence[task] = TaskEvidence(config, task, tmp_path, declared_spread(config, task))
            found._arms = {run: _arm(rng, shared[run], paired, tuned, 0.7, n) for run in (better, than)}
            found._arms[none] = _arm(rng, np.zeros(1), paired, tuned, 0.5, n)
        parts = Verdict(claim_id, verdict(config, "table1", claim, evidence)).parts
        decided += "holds" in parts or "does not hold" in parts
    return decided / replicates


def declared_spread_dropped(monkeypatch):
    """The rule of the runs as built: no arm adds a declared pretraining spread."""
    monkeypatch.setattr(rule, "declared_part", lambda pretrained, spreads: (0.0, 0.0))


def _shape_seeds(raw_params, profile: str, claim_id: str) -> int:
    config = config_with_profile(raw_params, profile)
    return len(pretraining_runs(config, claim_runs(config, "table1", claim_of(claim_id))[0][0]))


@pytest.mark.parametrize("profile, claim_id", SHAPES)
def test_equal_recipes_are_decided_at_most_at_the_nominal_rate_through_the_claim_path(
        raw_params, monkeypatch, tmp_path, profile, claim_id):
    replicates = 200
    rate = _decided_rate(raw_params, monkeypatch, tmp_path, profile, claim_id, replicates)
    assert rate <= NOMINAL + tolerance(replicates), (profile, claim_id, rate)


# each mutant where it matters: the declared spread where an arm has fewer than 3 pretraining
# seeds, the few-seed correction where the seeds are drawn (3 pretraining seeds)
MUTANTS = {"few-seed correction dropped": (few_seed_correction_dropped, lambda seeds: seeds >= 2),
           "declared spread dropped": (declared_spread_dropped, lambda seeds: seeds < rule.FEW_PRETRAINING_SEEDS)}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
@pytest.mark.parametrize("profile, claim_id", SHAPES)
def test_the_claim_path_test_catches_a_rule_without_its_correction(raw_params, monkeypatch, tmp_path, profile,
                                                                  claim_id, mutant):
    mutate, matters = MUTANTS[mutant]
    if not matters(_shape_seeds(raw_params, profile, claim_id)):
        pytest.skip(f"{mutant}: no part of the rule at this shape's pretraining seeds")
    mutate(monkeypatch)
    replicates = 200
    rate = _decided_rate(raw_params, monkeypatch, tmp_path, profile, claim_id, replicates)
    assert rate > NOMINAL + tolerance(replicates), (profile, claim_id, mutant, rate)


@pytest.mark.slow
# gpu-day has no SMILES arms (chosen by power): its one-pretraining-seed claim, MAE-LM's, instead
@pytest.mark.parametrize("profile, claim_id", SHAPES + [("gpu-day", "maelm_beats_mlm_text"),
                                                         ("paper", "exlm_beats_mlm_smiles"),
                                                         ("tiny-3seeds", "exlm_beats_mlm_text")])
def test_equal_recipes_hold_the_level_over_more_builds(raw_params, monkeypatch, tmp_path, profile, claim_id):
    replicates = 1000
    rate = _decided_rate(raw_params, monkeypatch, tmp_path, profile, claim_id, replicates)
    assert rate <= NOMINAL + tolerance(replicates), (profile, claim_id, rate)
