"""Claims on analysis measures compare two recipes from one pretraining run each (the analyses
measure seed 0): table2's "entropy rises with corruption" and table7's generation perplexity.
Another pretraining run of a recipe moves its entropy or its NLL by far more than another draw
of tokens or blocks would, so each claim adds the spread between pretraining seeds that
noise.yaml declares for the measure (`eval.verdict.compare_measured`).

Under the null (two equal recipes whose runs differ by their pretraining luck, of the declared
size, and by the tokens' or blocks' noise) a claim must be decided at most at the nominal rate;
a rule that drops the declared spread (the tokens' noise alone, the rule before 2026-12-02)
must be caught deciding far more often; and without a declared spread nothing is decided."""

from __future__ import annotations

import math

import numpy as np
import pytest

from maskbench.eval import verdict as rule
from maskbench.report import look_around, repeated_mlm_grid
from tests.helpers import config_with_profile, declare_measure_spread

NOMINAL = 0.05
REPLICATES = 400
SD_P = 0.1           # bits or nats between pretraining seeds: the size measured on grid's SMILES cells


def tolerance(replicates: int) -> float:
    """2.5 Monte-Carlo standard errors of a rate at the nominal."""
    return 2.5 * math.sqrt(NOMINAL * (1 - NOMINAL) / replicates)


def spread_dropped(monkeypatch):
    """The mutant: a measure's claim that reads the tokens' or blocks' noise alone."""
    shipped = rule.compare_measured

    def tokens_alone(difference, sampling_variance, spreads, confidence):
        return shipped(difference, sampling_variance, [rule.DeclaredSpread(0.0, 1, "none") for _ in spreads],
                       confidence)

    for module in (repeated_mlm_grid, look_around):
        monkeypatch.setattr(module, "compare_measured", tokens_alone)


CELLS = [((1, 0.15), "smiles_mlm"), ((1, 0.387), "smiles_mlm_p39")]
LEARNED = {"smiles_mlm": 1.0, "smiles_mlm_p39": 1.0}


def entropy(bits: float, std_bits: float = 0.6, tokens: int = 5000) -> dict:
    return {"entropy": {"applies": True, "bits": bits, "std_bits": std_bits, "tokens": tokens}}


def entropy_null_rate(config, rng) -> float:
    """How often two equal cells' entropies are read as rising or falling."""
    decided = 0
    for _ in range(REPLICATES):
        measured = {run: entropy(2.0 + SD_P * rng.standard_normal() + 0.6 / math.sqrt(5000) * rng.standard_normal())
                    for run in LEARNED}
        decided += not repeated_mlm_grid.entropy_claim(config, CELLS, measured, LEARNED).startswith("not decided")
    return decided / REPLICATES


def perplexity_null_rate(config, rng) -> float:
    """How often two equal recipes' generation NLLs over 64 paired blocks are read as differing."""
    blocks = 5.0 + 0.5 * rng.standard_normal(64)   # blocks differ in difficulty far more than runs do
    decided = 0
    for _ in range(REPLICATES):
        measured = {}
        for run in ("varlen_mlm", "mlm"):
            nll = blocks + SD_P * rng.standard_normal() + 0.05 * rng.standard_normal(64)
            measured[run] = {"block_nll": nll.tolist(), "generation_perplexity": math.exp(nll.mean())}
        decided += not look_around.perplexity_verdict(config, "varlen_mlm", "mlm", measured).startswith("not decided")
    return decided / REPLICATES


NULL_RATES = {"entropy": ("entropy_bits", entropy_null_rate), "generation perplexity": ("generation_nll",
                                                                                        perplexity_null_rate)}


@pytest.mark.parametrize("claim", sorted(NULL_RATES))
def test_equal_recipes_are_decided_at_most_at_the_nominal_rate(raw_params, monkeypatch, claim):
    config = config_with_profile(raw_params, "grid")
    measure, null_rate = NULL_RATES[claim]
    declare_measure_spread(monkeypatch, config, measure, SD_P)
    assert null_rate(config, np.random.default_rng(0)) <= NOMINAL + tolerance(REPLICATES)


@pytest.mark.parametrize("claim", sorted(NULL_RATES))
def test_the_null_test_catches_a_rule_without_the_declared_spread(raw_params, monkeypatch, claim):
    config = config_with_profile(raw_params, "grid")
    measure, null_rate = NULL_RATES[claim]
    declare_measure_spread(monkeypatch, config, measure, SD_P)
    spread_dropped(monkeypatch)
    assert null_rate(config, np.random.default_rng(0)) > NOMINAL + tolerance(REPLICATES)


def test_an_entropy_pair_is_decided_against_the_tokens_and_the_declared_spread(raw_params, monkeypatch):
    """0.2 bits between two cells of 10,000 tokens each (std 1 bit): 14 token standard errors, and
    inside the noise of two pretraining runs 0.1 bits apart (t on 6 degrees of freedom: 2.45 x
    0.142 = 0.35 bits); 0.6 bits beyond it. No declared spread: no pair decided, and it says why."""
    config = config_with_profile(raw_params, "grid")
    declare_measure_spread(monkeypatch, config, "entropy_bits", None)
    apart = {"smiles_mlm": entropy(1.0, 1.0, 10000), "smiles_mlm_p39": entropy(1.2, 1.0, 10000)}
    claim = repeated_mlm_grid.entropy_claim(config, CELLS, apart, LEARNED)
    assert claim.startswith("not decided: 0 rises, 0 falls; decided on 0 of 1 pairs of neighbouring cells (1 not "
                            "decided, 0 did not learn)")
    assert rule.NO_DECLARED_SPREAD in claim
    declare_measure_spread(monkeypatch, config, "entropy_bits", 0.1)
    claim = repeated_mlm_grid.entropy_claim(config, CELLS, apart, LEARNED)
    assert claim.startswith("not decided: 0 rises, 0 falls")
    assert "entropy_bits on moses 0.1 bits, measured on 3 seeds of 3 runs" in claim
    apart["smiles_mlm_p39"] = entropy(1.6, 1.0, 10000)
    assert repeated_mlm_grid.entropy_claim(config, CELLS, apart, LEARNED).startswith("holds: 1 rises, 0 falls")
    apart["smiles_mlm_p39"] = entropy(0.4, 1.0, 10000)
    assert repeated_mlm_grid.entropy_claim(config, CELLS, apart, LEARNED).startswith("does not hold: 0 rises, 1 falls")


def test_compare_measured_adds_each_sides_declared_spread():
    """Each side adds the figure's variance; one figure for both sides is one estimate, so the
    interval keeps its degrees of freedom (6 here), not the 12 of two independent ones; two
    figures (two corpora) count as two."""
    spread = rule.DeclaredSpread(0.1, 6, "x")
    found = rule.compare_measured(0.3, 0.01 ** 2, [spread, spread], 0.95)
    se = math.sqrt(0.01 ** 2 + 2 * 0.1 ** 2)
    assert math.isclose(found.se, se) and math.isclose(found.df, rule.satterthwaite(se ** 2, [(0.02, 6)]))
    assert 5.9 < found.df < 6.1 and found.noise == "x"
    assert found.outcome == rule.UNDECIDED and found.low < 0 < found.high
    other = rule.compare_measured(0.3, 0.01 ** 2, [spread, rule.DeclaredSpread(0.1, 6, "y")], 0.95)
    assert math.isclose(other.df, rule.satterthwaite(se ** 2, [(0.01, 6), (0.01, 6)])) and other.df > 11
    assert rule.compare_measured(0.5, 0.01 ** 2, [spread, spread], 0.95).outcome == rule.A_BETTER
    assert rule.compare_measured(-0.5, 0.01 ** 2, [spread, spread], 0.95).outcome == rule.B_BETTER
    missing = rule.compare_measured(5.0, 0.01 ** 2, [spread, None], 0.95)
    assert missing.outcome == rule.UNDECIDED and missing.why == rule.NO_DECLARED_SPREAD
