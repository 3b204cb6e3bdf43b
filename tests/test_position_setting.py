"""Position encoding is one pretraining setting shared by every run (`pretrain.positions`): the
arms of a table differ in objective only, a run's overrides change it, and ExLM's 2-D RoPE is
that setting's RoPE plus the clone index, refused at validation where there is no RoPE."""

import pytest

from maskbench.config import ParamsError, position_scheme, read_yaml, run_settings, schema_path, validate
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import encoder_settings


def schema():
    return read_yaml(schema_path())


def built_scheme(config: dict, run: str) -> str:
    """The position scheme of the encoder pretraining builds for `run`."""
    settings = run_settings(config, run)
    fields = encoder_settings(config["runs"][run], settings["seq_len"], settings["positions"])
    encoder = Encoder(EncoderConfig(vocab_size=16, n_layer=1, n_embd=16, n_head=2, n_inner=16, **fields))
    return encoder.config.position_scheme


def test_the_arms_of_a_table_share_one_position_scheme(config):
    runs = ["mlm", "mae_lm", "exlm"]
    assert set(runs) <= set(config["tables"]["table1"]["runs"])
    schemes = {run: built_scheme(config, run) for run in runs}
    assert schemes == {run: position_scheme(config, run) for run in runs}
    assert schemes["mlm"] == schemes["mae_lm"] == config["pretrain"]["positions"] == "rope"
    # ExLM's 2-D RoPE is the same rope plus the clone index
    assert schemes["exlm"] == "rope2d" and schemes["exlm"].replace("rope2d", "rope") == schemes["mlm"]


def test_overrides_change_the_scheme(raw_params):
    raw_params["runs"]["exlm"]["overrides"] = {"positions": "rope+relative_bias"}
    raw_params["runs"]["mae_lm"]["overrides"] = {"positions": "absolute"}
    config = validate(raw_params, schema())
    assert built_scheme(config, "exlm") == "rope2d+relative_bias"
    assert built_scheme(config, "mae_lm") == "absolute"
    assert built_scheme(config, "mlm") == "rope"
    # the papers' own schemes, as runs outside the default table
    assert position_scheme(config, "mlm_paper") == "absolute"
    assert position_scheme(config, "mae_lm_paper") == "absolute+relative_bias"
    assert not {"mlm_paper", "mae_lm_paper"} & set(config["tables"]["table1"]["runs"])


def test_exlm_2d_rope_without_rope_is_refused_naming_run_knob_and_choices(raw_params):
    raw_params["runs"]["exlm"]["overrides"] = {"positions": "absolute+relative_bias"}
    with pytest.raises(ParamsError) as info:
        validate(raw_params, schema())
    message = str(info.value)
    assert "runs.exlm.knobs.rope2d" in message and "'absolute+relative_bias'" in message
    assert "['rope', 'rope+relative_bias']" in message and "rope2d: false" in message
    raw_params["runs"]["exlm"]["knobs"]["rope2d"] = False  # 1-D positions: no clone index needed
    assert position_scheme(validate(raw_params, schema()), "exlm") == "absolute+relative_bias"


def test_rope2d_is_not_a_setting(raw_params):
    raw_params["pretrain"]["positions"] = "rope2d"
    with pytest.raises(ParamsError, match="pretrain.positions"):
        validate(raw_params, schema())


def test_a_rope_base_of_one_or_less_is_refused_naming_the_key(raw_params):
    raw_params["pretrain"]["rope_base"] = 1   # every channel pair would stand still
    with pytest.raises(ParamsError, match="pretrain.rope_base"):
        validate(raw_params, schema())
