"""The objective cards (src/maskbench/objectives/cards.py) are what every layer reads of an
objective: a toy objective registered by its card alone is validated, built, costed, scheduled
and labelled; the cards agree with the classes and the schema's descriptions of the knobs."""

from __future__ import annotations

import copy
import inspect

import pytest

from maskbench.config import (ParamsError, pretrained, read_yaml, run_label, schema_path, table_cells, validate)
from maskbench.objectives.cards import CARDS, MASK_RATIO, ObjectiveCard, card
from maskbench.objectives.registry import OBJECTIVES, build_objective, encoder_settings
from maskbench.objectives.cost import Passes, mask_count
from maskbench.objectives.mlm import MaskedLM


class ToyLM(MaskedLM):
    """MLM that masks at least `least` tokens: a class of its own, defined outside the package."""

    name = "toy"

    def __init__(self, encoder, specials, mask_ratio: float = 0.2, least: int = 1):
        super().__init__(encoder, specials, mask_ratio)
        self.least = least


def toy_passes(size: dict, T: int, knobs: dict) -> Passes:
    """Twice MLM's predictions, so that its cost differs from MLM's by what the card says."""
    return Passes(((T, size["n_layer"]),), 2 * max(knobs["least"], mask_count(T - 2, knobs["mask_ratio"])))


TOY = ObjectiveCard("toy", f"{__name__}:ToyLM", "toy: MLM masking at least `least` tokens",
                    {"mask_ratio": 0.2, "least": 1}, toy_passes, rate="mlm",
                    problems=lambda knobs: [] if knobs["least"] >= 1 else [f"least={knobs['least']}; expected >= 1"])
TOY_CONTROL = ObjectiveCard("toy_control", f"{__name__}:ToyLM", "toy control: not pretrained",
                            {"mask_ratio": 0.2, "least": 1}, toy_passes, pretrains=False, rate="mlm")


@pytest.fixture
def registered(monkeypatch):
    """The toy objectives registered the one way the guide names: a card in CARDS."""
    monkeypatch.setitem(CARDS, "toy", TOY)
    monkeypatch.setitem(CARDS, "toy_control", TOY_CONTROL)


def with_toy_runs(raw: dict, **toy_knobs) -> dict:
    raw["runs"]["toy"] = {"modality": "text", "objective": "toy", "knobs": toy_knobs}
    raw["runs"]["toy_control"] = {"modality": "text", "objective": "toy_control"}
    raw["tables"]["table1"]["runs"] += ["toy", "toy_control"]
    return raw


def check(raw: dict) -> dict:
    return validate(raw, read_yaml(schema_path()), every_profile=False)


def test_validation_takes_the_objectives_from_the_cards(raw_params, registered):
    misspelt = with_toy_runs(copy.deepcopy(raw_params), lest=3)
    config = check(with_toy_runs(raw_params, least=3))
    assert config["runs"]["toy"]["objective"] == "toy"
    with pytest.raises(ParamsError, match=r"runs\.toy\.knobs: \['lest'\] not knobs of toy; expected some of "
                                          r"\['least', 'mask_ratio'\]"):
        check(misspelt)


def test_validation_runs_the_cards_checks_across_knobs(raw_params, registered):
    with pytest.raises(ParamsError, match=r"runs\.toy\.knobs: least=0; expected >= 1"):
        check(with_toy_runs(raw_params, least=0))


def test_an_objective_without_a_card_is_refused_naming_those_with_one(raw_params, registered):
    raw_params["runs"]["typo"] = {"modality": "text", "objective": "tyo"}
    with pytest.raises(ParamsError, match=r"runs\.typo\.objective: 'tyo' is not one of \[.*'toy', 'toy_control'"):
        check(raw_params)


def test_the_registry_builds_the_class_the_card_names(registered):
    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.registry import SpecialTokens

    run = {"objective": "toy", "knobs": {"least": 2}}
    encoder = Encoder(EncoderConfig(vocab_size=40, n_layer=1, n_embd=16, n_head=2, n_inner=32,
                                    **encoder_settings(run, 16, "rope")))
    model = build_objective(run, encoder, SpecialTokens(pad=0, cls=1, sep=2, mask=3))
    assert type(model) is ToyLM and model.least == 2 and model.mask_ratio == 0.2
    assert model.trains and not model.causal and model.card is TOY


def test_resources_cost_a_toy_by_its_card_and_skip_a_control(raw_params, registered):
    from maskbench import resources

    raw_params["runs"]["mlm_twin"] = {"modality": "text", "objective": "mlm", "knobs": {"mask_ratio": 0.2}}
    config = check(with_toy_runs(raw_params, least=1))
    size, T = resources.model_size(config, "toy"), config["pretrain"]["seq_len"]
    toy, twin = (resources.objective_passes(config["runs"][r], size, T) for r in ("toy", "mlm_twin"))
    assert toy.predictions == 2 * twin.predictions  # the card's cost, not MLM's
    # its card's throughput row (mlm's): seconds in proportion to FLOPs
    vocab = resources.vocab_size(config, "text")
    seconds = {r: resources.pretrain_seconds(config, r, "h100", 1, 1) for r in ("toy", "mlm_twin", "toy_control")}
    assert seconds["toy"] / seconds["mlm_twin"] == pytest.approx(toy.flops(size, vocab) / twin.flops(size, vocab))
    # the control trains no step: only its validation passes are counted
    validation_only = (toy.flops(size, vocab) * resources.FORWARD * config["pretrain"]["eval_blocks"]
                       / (config["throughput"]["h100"]["pretrain"]["mlm"] * 1e12))
    assert seconds["toy_control"] == pytest.approx(validation_only)


def test_the_workflow_and_report_ask_the_card_whether_a_run_is_pretrained(raw_params, registered):
    from maskbench.report.knobs import knobs_text
    from maskbench.stages import STAGES

    config = check(with_toy_runs(raw_params, least=3))
    assert {"run": "toy"} in STAGES["pretrain"].jobs(config)
    assert ("toy", "word_order") in table_cells(config, "table1")
    assert pretrained(config, ["toy", "toy_control", "none", "mlm"]) == ["toy", "mlm"]
    assert run_label(config, "toy") == "toy"
    assert run_label(config, "toy_control") == "toy control: not pretrained (`toy_control`)"
    assert run_label(config, "none") == "control: no pretraining (`none`)"
    assert knobs_text(config, "toy_control") == "—" and "least = 3" in knobs_text(config, "toy")
    report_inputs = STAGES["report"].inputs(config, {"table": "table1"})
    assert any("/toy/" in path for path in report_inputs["curves"])
    assert not any("toy_control" in path for path in report_inputs["curves"])


@pytest.mark.parametrize("name", sorted(CARDS))
def test_each_class_takes_its_defaults_from_its_card(name):
    parameters = inspect.signature(OBJECTIVES[name].__init__).parameters
    defaults = {k: p.default for k, p in parameters.items() if k not in ("self", "encoder", "specials")}
    assert defaults == card(name).defaults
    assert OBJECTIVES[name].name == name


def test_the_schema_describes_each_cards_knobs():
    """The schema types each knob of the papers' objectives (and documents it); its knob lists
    are the cards' (a toy objective needs none: its card checks the names)."""
    schema = read_yaml(schema_path())
    typed = {}
    for rule in schema["properties"]["runs"]["additionalProperties"]["allOf"]:
        objective = rule["if"]["properties"]["objective"]["const"]
        typed[objective] = set(rule["then"]["properties"]["knobs"].get("properties", {}))
    assert typed == {name: set(c.defaults) for name, c in CARDS.items()}


def test_the_masked_objectives_share_the_papers_mask_ratio():
    assert {name: c.defaults.get("mask_ratio", c.defaults.get("mask_ratio_min")) for name, c in CARDS.items()
            if not c.causal} == dict.fromkeys(["exlm", "mae_lm", "mlm", "none", "repeated_mlm", "varlen_mlm"],
                                              MASK_RATIO)
