"""The `paper` profile against the papers' hyperparameter tables, one test per table: each
resolves the settings of the runs and tasks the table governs through the project's own loader
(`validate`, `run_settings`, `finetune_settings`, `task_grid`, `task_seeds`) and compares every
value the table states. What the project cannot match is in
src/maskbench/report/paper_departures.yaml, which docs/paper-profile.md renders
(tests/test_paper_departures.py)."""

from __future__ import annotations

import inspect

import pytest

from maskbench.config import differences, read_yaml, resolved_run, run_tasks, schema_path, table_rows, validate
from maskbench.config.settings import finetune_settings, run_settings, task_grid, task_seeds
from maskbench.model.encoder import EncoderConfig
from maskbench.objectives.registry import encoder_settings
from maskbench.train.optim import build_optimizer
from tests.helpers import REPO


@pytest.fixture(scope="module")
def paper(request) -> dict:
    raw = read_yaml(REPO / "params.yaml")
    raw["profile"] = "paper"
    return validate(raw, read_yaml(schema_path()))


def size(config: dict, run: str) -> dict:
    return config["model_sizes"][run_settings(config, run)["model"]]


def fine_tuning_values(config: dict, task: str) -> dict[str, set]:
    """Each fine-tuning setting of a task as the set of values its grid search tries (one value
    where the grid does not search it)."""
    settings, grid = finetune_settings(config, task), task_grid(config, task)
    return {key: set(grid.get(key, [value])) for key, value in settings.items()}


BASE = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072}
# fairseq's AdamW: weight decay on every parameter (both papers' official code)
FAIRSEQ = {"weight_decay_on": "all", "output_bias_init": "zero"}


# MAE-LM Tab. 3 (base column), App. A (12 layers x 768, a 4-layer decoder of the same width,
# 32,768 uncased subword units) and App. C (absolute + relative positions in the encoder; the
# official code's post-LN blocks with an embedding LayerNorm and its decoder's input LayerNorm).
MAE_LM_TAB3 = {"steps": 125_000, "lr": 5e-4, "batch_size": 2048, "warmup_steps": 10_000, "seq_len": 512,
               "eps": 1e-6, "betas": [0.9, 0.98], "clip_norm": 2.0, "dropout": 0.1, "weight_decay": 0.01,
               "decay_power": 1.0, "end_lr": 0.0, "block_norm": "post", **FAIRSEQ}
MAE_LM_RUNS = ["mae_lm", "mae_lm_paper", "mae_lm_paper_d25", "mae_lm_paper_d50", "mae_lm_paper_d75",
               "mae_lm_paper_d100", "mae_lm_paper_dec1", "mae_lm_paper_dec2", "mae_lm_paper_misaligned",
               "mae_lm_paper_no_relative", "mae_lm_paper_resets_mask", "mae_lm_paper_random_replace",
               "mae_lm_paper_dec6", "mae_lm_paper_w512", "mae_lm_paper_w1024", "mae_lm_paper_self_cross",
               "mae_lm_paper_cross"]


@pytest.mark.parametrize("run", ["mlm", "mlm_paper", *MAE_LM_RUNS])
def test_mae_lm_tab3_pretraining(paper, run):
    """MAE-LM Tab. 3, base: "the same set of hyperparameters ... for MAE-LM, RoBERTa (Ours) and
    ablations" (App. D), so its MLM baseline too."""
    settings = run_settings(paper, run)
    assert {k: settings[k] for k in MAE_LM_TAB3} == MAE_LM_TAB3
    assert size(paper, run) == BASE
    assert paper["tokenizer"]["text"]["vocab_size"] == 32_768 and paper["tokenizer"]["text"]["lowercase"] is True


@pytest.mark.parametrize("run", MAE_LM_RUNS)
def test_mae_lm_tab3_decoder_and_relative_positions(paper, run):
    """MAE-LM App. A: a 4-layer decoder (its Tab. 2 rows change the depth); Tab. 3: relative
    position buckets 32, max distance 128, in the encoder (App. C) of the paper's runs."""
    spec = paper["runs"][run]
    assert spec["knobs"]["decoder_input_norm"] is True
    if run not in ("mae_lm_paper_dec1", "mae_lm_paper_dec2", "mae_lm_paper_dec6"):
        assert spec["knobs"]["decoder_layers"] == 4
    if run.startswith("mae_lm_paper") and run != "mae_lm_paper_no_relative":
        settings = run_settings(paper, run)
        encoder = EncoderConfig(**encoder_settings(spec, settings["seq_len"], settings["positions"]))
        assert "relative_bias" in encoder.position_scheme
        assert (encoder.relative_buckets, encoder.relative_max_distance) == (32, 128)


# MAE-LM Tab. 2 (§4.3), each row against the base "enc. w/o. [MASK]; aligned position encoding
# w. relative position encoding; bi. self-attention; 4 layer, 768 dimension": what it changes
# (resolved knobs of table5's row); table5 adds a 1-layer decoder
MAE_LM_TAB2 = {
    "mae_lm_delta_100": {"knobs.delta": 1.0},                                          # enc. w. [MASK] + dec.
    "mae_lm_resets_mask": {"knobs.delta": 1.0, "knobs.decoder_resets_mask": True},     # enc. w. [MASK], dec. resets
    "mae_lm_random_replace": {"knobs.delta": 1.0, "knobs.masked_input": "random"},     # random replace w. real token
    "mae_lm_misaligned": {"knobs.aligned_positions": False},
    "mae_lm_no_relative": {"positions": "absolute"},
    "mae_lm_decoder_1": {"knobs.decoder_layers": 1},
    "mae_lm_decoder_2": {"knobs.decoder_layers": 2},                                   # 2 layer, 768 dimension
    "mae_lm_decoder_6": {"knobs.decoder_layers": 6},                                   # 6 layer, 768 dimension
    "mae_lm_width_512": {"knobs.decoder_width": 512},                                  # 4 layer, 512 dimension
    "mae_lm_width_1024": {"knobs.decoder_width": 1024},                                # 4 layer, 1024 dimension
    "mae_lm_self_cross_attention": {"knobs.decoder_attention": "self+cross"},           # bi. self-att. + cross-att.
    "mae_lm_cross_attention": {"knobs.decoder_attention": "cross"},                    # cross-attention
}


@pytest.mark.parametrize("row_id", sorted(MAE_LM_TAB2))
def test_mae_lm_tab2_rows_change_the_4_layer_base_as_the_paper(paper, row_id):
    """MAE-LM Tab. 2: each ablation row changes the base (a 4-layer decoder as wide as the
    768-wide encoder, no [MASK] in the encoder, positions absolute + T5 relative bias) in what
    the paper names and nothing else; so the decoder rows ablate 4 → N."""
    rows = table_rows(paper, "table5")
    base, mine = resolved_run(paper, rows["mae_lm"]["run"]), resolved_run(paper, rows[row_id]["run"])
    assert (base["knobs.decoder_layers"], base["knobs.delta"], base["positions"]) == (4, 0.0, "absolute+relative_bias")
    assert "knobs.decoder_width" not in base and size(paper, rows["mae_lm"]["run"])["n_embd"] == 768
    assert rows[row_id]["of"] == "mae_lm"
    assert {key: mine.get(key) for key in differences(paper, rows[row_id]["run"], rows["mae_lm"]["run"])} == \
        MAE_LM_TAB2[row_id]
    assert "mae_lm_decoder_4" not in rows  # the base itself


GLUE_LARGE, GLUE_SMALL = ("mnli", "qqp", "qnli", "sst2"), ("cola", "rte", "mrpc", "stsb")


@pytest.mark.parametrize("task", [*GLUE_LARGE, *GLUE_SMALL])
def test_mae_lm_tab4_and_exlm_tab11_glue_fine_tuning(paper, task):
    """MAE-LM Tab. 4 (base) = ExLM Tab. 11: the grids of the large and the small GLUE tasks,
    sequence length 512, no clipping, weight decay 0.01; medians of five seeds (MAE-LM App. D,
    ExLM Tab. 3)."""
    values = fine_tuning_values(paper, task)
    if task in GLUE_LARGE:
        expected = {"lr": {1e-5, 2e-5, 3e-5, 4e-5}, "batch_size": {32}, "epochs": {2, 3, 5}, "warmup_ratio": {0.06}}
    else:
        expected = {"lr": {2e-5, 3e-5, 4e-5, 5e-5}, "batch_size": {16, 32}, "epochs": {2, 3, 5, 10},
                    "warmup_ratio": {0.06, 0.1}}
    assert {k: values[k] for k in expected} == expected
    assert values["max_len"] == {512} and values["clip_norm"] == {None} and values["weight_decay"] == {0.01}
    assert values["weight_decay_on"] == {"all"}
    assert task_seeds(paper, task) == [1, 2, 3, 4, 5] and paper["tasks"][task].get("aggregate", "median") == "median"


def test_mae_lm_tab5_and_exlm_tab11_squad_fine_tuning(paper):
    """MAE-LM Tab. 5 = ExLM Tab. 11, SQuAD 2.0: lr {2,3,4,5}e-5, batch {16, 32}, epochs {2, 3},
    warmup {6 %, 10 %}, sequence length 512, no clipping, weight decay 0.01."""
    values = fine_tuning_values(paper, "squad_v2")
    assert {k: values[k] for k in ("lr", "batch_size", "epochs", "warmup_ratio")} == {
        "lr": {2e-5, 3e-5, 4e-5, 5e-5}, "batch_size": {16, 32}, "epochs": {2, 3}, "warmup_ratio": {0.06, 0.1}}
    assert values["max_len"] == {512} and values["clip_norm"] == {None} and values["weight_decay"] == {0.01}


def test_mae_lm_tab4_adam_of_fine_tuning():
    """MAE-LM Tab. 4-5: Adam ε 1e-6, (β1, β2) = (0.9, 0.98): fine-tuning builds its optimizer
    with these defaults (it passes no betas or eps)."""
    defaults = inspect.signature(build_optimizer).parameters
    assert defaults["betas"].default == (0.9, 0.98) and defaults["eps"].default == 1e-6


# ExLM Tab. 5 (App. B.1): Repeated MLM and "the ablation experiments" in its setting
EXLM_TAB5 = {"lr": 2e-3, "warmup_steps": 5000, "steps": 50_000, "batch_size": 4096, "dropout": 0.1,
             "betas": [0.9, 0.98], "weight_decay": 0.01, "clip_norm": None, "decay_power": 1.0, "seq_len": 512,
             "block_norm": "pre", **FAIRSEQ}
TAB5_RUNS = ["repeated_mlm", "mlm_p2", "mlm_p15", "mlm_p39", "mlm_p62", "mlm_p79", "rmlm_k2_p39", "rmlm_k2_p62",
             "rmlm_k2_p79", "rmlm_k4_p39", "rmlm_k4_p62", "rmlm_k4_p79", "rmlm_k8_p62", "rmlm_k8_p79", "exlm_k2_p15",
             "exlm_k4_p15", "exlm_k8_p15", "exlm_k2_p39", "exlm_k4_p39", "exlm_k8_p39", "exlm_k4_p15_no_rope2d",
             "exlm_k4_p15_no_transitions", "exlm_k4_p15_sparse", "exlm_k4_p15_no_transitions_ctc", "exlm_k4_p15_gated"]


@pytest.mark.parametrize("run", TAB5_RUNS)
def test_exlm_tab5_repeated_mlm_setting(paper, run):
    """ExLM Tab. 5: lr 2e-3, 5K warmup, 50K steps, 4,096 sequences, dropout 0.1, 12 x 768 x
    3,072, (0.9, 0.98), weight decay 0.01, clip norm 0.0 (fairseq: off), max length 512 · k."""
    settings = run_settings(paper, run)
    assert {k: settings[k] for k in EXLM_TAB5} == EXLM_TAB5
    assert size(paper, run) == BASE
    spec = paper["runs"][run]
    k = spec.get("knobs", {}).get("k", 1) if spec["objective"] == "repeated_mlm" else 1
    encoder = EncoderConfig(**encoder_settings(spec, settings["seq_len"], settings["positions"]))
    assert encoder.max_position >= 512 * k


def test_exlm_tab5_vanilla_mlm_pp_trains_at_exlms_measured_cost(paper):
    """ExLM App. Q.2, Tab. 12: Vanilla MLM++ costs what ExLM (k = 4) costs, 104.2 / 54.7 A100
    hours = 1.905 x the Tab. 5 steps (the paper rounds to 100K); otherwise the Tab. 5 setting."""
    settings = run_settings(paper, "mlm_pp_tab5")
    assert settings["steps"] == round(50_000 * 104.2 / 54.7, -1) == 95_250
    assert {k: settings[k] for k in EXLM_TAB5 if k != "steps"} == {k: v for k, v in EXLM_TAB5.items() if k != "steps"}


@pytest.mark.parametrize("task", ["rmlm_mnli", "rmlm_qnli", "rmlm_qqp", "rmlm_rte"])
def test_exlm_tab6_repeated_mlm_fine_tuning(paper, task):
    """ExLM Tab. 6: MNLI, QNLI, QQP, RTE at lr 5e-5, batch 32, 3 epochs, 6 % warmup, seeds
    {1, 2, 3}, the mean of the three (App. B.2); one setting, no grid."""
    values = fine_tuning_values(paper, task)
    assert {k: values[k] for k in ("lr", "batch_size", "epochs", "warmup_ratio")} == {
        "lr": {5e-5}, "batch_size": {32}, "epochs": {3}, "warmup_ratio": {0.06}}
    assert task_grid(paper, task) == {}
    assert task_seeds(paper, task) == [1, 2, 3] and paper["tasks"][task]["aggregate"] == "mean"


TAB6_TASKS = ["rmlm_mnli", "rmlm_qnli", "rmlm_qqp", "rmlm_rte"]
EXLM_TAB2_ROWS = ("vanilla_mlm", "vanilla_mlm_pp", "exlm", "exlm_no_rope2d", "exlm_no_transitions",
                  "exlm_no_transitions_ctc", "exlm_sparse_dag", "exlm_gated_transitions")


def test_exlm_tab2_rows_fine_tune_by_tab6_and_mae_lm_tab2_rows_by_its_tab4(paper):
    """ExLM Tab. 2 and 13 report MNLI, QNLI, QQP, RTE, and their Vanilla MLM numbers are those
    of Tab. 4 and Fig. 3: Tab. 6's protocol (one setting, means of 3 seeds), the tasks tables 2
    and 3 use. MAE-LM Tab. 2's rows: the GLUE average of its Tab. 4 fine-tuning (8 tasks). The
    `none` control is fine-tuned on both, so every row has its control."""
    assert paper["tables"]["table2"]["tasks"] == paper["tables"]["table3"]["tasks"] == TAB6_TASKS
    for row_id, row in table_rows(paper, "table5").items():
        expected = TAB6_TASKS if row_id in EXLM_TAB2_ROWS else [*GLUE_LARGE, *GLUE_SMALL]
        assert sorted(run_tasks(paper, "table5", row["run"])) == sorted(expected), row_id
    assert sorted(run_tasks(paper, "table5", "none")) == sorted([*GLUE_LARGE, *GLUE_SMALL, *TAB6_TASKS])


SMILES_RUNS = ["smiles_none", "smiles_mlm", "smiles_exlm", "smiles_varlen_mlm", "smiles_repeated_mlm", "smiles_mae_lm",
               "smiles_ar", "smiles_dar", "smiles_exlm_k4_p15", "smiles_exlm_k2_p39"]


@pytest.mark.parametrize("run", SMILES_RUNS)
def test_exlm_tab7_molecular_pretraining(paper, run):
    """ExLM Tab. 7 (App. J): lr 5e-4, 10K warmup, 120K steps, 64K tokens a batch, dropout 0.1,
    9 layers x 768 x 2,048 with 12 heads, (0.9, 0.98), weight decay 0.0, clip norm 1.0; its
    SMILES-BERT has "the same training hyperparameters as ExLM" (App. L)."""
    settings = run_settings(paper, run)
    expected = {"lr": 5e-4, "warmup_steps": 10_000, "steps": 120_000, "dropout": 0.1, "betas": [0.9, 0.98],
                "weight_decay": 0.0, "clip_norm": 1.0, "block_norm": "pre", **FAIRSEQ}
    assert {k: settings[k] for k in expected} == expected
    assert settings["batch_size"] * settings["seq_len"] == 64 * 1024
    assert size(paper, run) == {"n_layer": 9, "n_embd": 768, "n_head": 12, "n_inner": 2048}


def test_exlm_tab7_expanded_states_and_drop_ratio(paper):
    """ExLM Tab. 7: 2 expanded states, fragments drop ratio 0.15 (its Tab. 1 row)."""
    assert paper["runs"]["smiles_exlm"]["knobs"]["k"] == 2
    assert (paper["runs"]["smiles_exlm"]["knobs"]["mask_ratio"] == 0.15
            == paper["runs"]["smiles_mlm"]["knobs"]["mask_ratio"])


# ExLM Tab. 8: epochs, batch size, learning rate, warmup ratio, pooler dropout per task
EXLM_TAB8 = {"bace": (60, 64, 1e-4, 0.06, 0.2), "bbbp": (40, 128, 4e-4, 0.06, 0.1), "tox21": (80, 128, 1e-4, 0.06, 0.1),
             "sider": (100, 32, 5e-4, 0.4, 0.0), "muv": (40, 128, 2e-5, 0.2, 0.1),
             "clintox": (100, 256, 5e-5, 0.1, 0.5), "toxcast": (80, 64, 1e-4, 0.06, 0.1)}


@pytest.mark.parametrize("task", sorted(EXLM_TAB8))
def test_exlm_tab8_molecular_fine_tuning(paper, task):
    """ExLM Tab. 8 (App. K): each MoleculeNet set's epochs, batch, lr, warmup and pooler dropout,
    three seeds averaged; dropout 0.1 is the encoder's (pretraining's 0.1, kept)."""
    settings = finetune_settings(paper, task)
    assert tuple(settings[k]
                 for k in ("epochs", "batch_size", "lr", "warmup_ratio", "pooler_dropout")) == EXLM_TAB8[task]
    assert task_grid(paper, task) == {} and task_seeds(paper, task) == [1, 2, 3]
    assert run_settings(paper, "smiles_exlm")["dropout"] == 0.1


@pytest.mark.parametrize("run", ["exlm"])
def test_exlm_tab10_textual_pretraining(paper, run):
    """ExLM Tab. 10 (App. N): lr 5e-4, 10K warmup, 125K steps, 2,048 sequences, 4 expanded
    states, dropout 0.1, 12 x 768 x 3,072, (0.9, 0.98), mask ratio 0.15, weight decay 0.01,
    clip norm 0.0 (off); pre-LN as its official code."""
    settings = run_settings(paper, run)
    expected = {"lr": 5e-4, "warmup_steps": 10_000, "steps": 125_000, "batch_size": 2048, "dropout": 0.1,
                "betas": [0.9, 0.98], "weight_decay": 0.01, "clip_norm": None, "decay_power": 1.0,
                "block_norm": "pre", **FAIRSEQ}
    assert {k: settings[k] for k in expected} == expected
    assert size(paper, run) == BASE
    assert paper["runs"][run]["knobs"]["k"] == 4 and paper["runs"][run]["knobs"]["mask_ratio"] == 0.15


def test_look_around_setup(paper):
    """Look Around §5: variable-length MLM samples the mask ratio uniformly from [0.15, 0.3] and
    is compared with fixed 0.15 and 0.3 (Tab. 7); the AR objectives are fine-tuned on the eight
    GLUE tasks (Tab. 2) and scored with its metrics: F1 for QQP and MRPC, Pearson for STS-B,
    Matthews correlation for CoLA, accuracy otherwise."""
    runs = paper["runs"]
    assert (runs["varlen_mlm"]["knobs"]["mask_ratio_min"], runs["varlen_mlm"]["knobs"]["mask_ratio_max"]) == (0.15, 0.3)
    assert runs["mlm"]["knobs"]["mask_ratio"] == 0.15 and runs["mlm_p30"]["knobs"]["mask_ratio"] == 0.3
    table7 = paper["tables"]["table7"]
    assert {"ar", "dar", "mlm", "mlm_p30", "varlen_mlm"} <= set(table7["runs"])
    headline = {paper["datasets"][paper["tasks"][t]["dataset"]]["benchmark"]: paper["tasks"][t]["metric"]
                for t in table7["tasks"]}
    assert headline == {"qqp": "f1", "mrpc": "f1", "stsb": "pearson", "cola": "matthews_corr",
                        "mnli": "accuracy", "qnli": "accuracy", "sst2": "accuracy", "rte": "accuracy"}


def test_every_paper_run_pretrains_on_whole_documents(paper):
    """MAE-LM's official code cuts its pretraining blocks with fairseq's `complete_doc` (a block
    never spans two documents) and ExLM App. J trains one molecule a sample (Uni-Mol's data), so
    every paper run, text and SMILES alike (the arms of a table read the same blocks), reads one
    document, or one piece of a longer one, a block; at most 64K tokens a SMILES step (Tab. 7's
    "max tokens 64K": 512 molecules of at most 128 tokens)."""
    for run in paper["runs"]:
        assert run_settings(paper, run)["blocks"] == "documents", run


def test_paper_profile_changes_no_other_profiles_recipe(raw_params):
    """The paper's settings are the paper profile's only: the default and grid profiles keep
    pre-LN, decay on matrices, the unigram bias, windows across documents and MAE-LM's decoder
    without an input norm."""
    for profile in ("tiny", "grid", "smoke"):
        raw = dict(raw_params, profile=profile)
        config = validate(raw, read_yaml(schema_path()))
        for run in ("mlm", "mae_lm", "exlm", "smiles_mae_lm"):
            settings = run_settings(config, run)
            assert (settings.get("block_norm", "pre") == "pre"
                    and settings.get("weight_decay_on", "matrices") == "matrices")
            assert settings["output_bias_init"] == "unigram" and settings["blocks"] == "windows"
            assert not config["runs"][run].get("knobs", {}).get("decoder_input_norm", False)
