"""The `paper` profile against the papers' hyperparameter tables. Each `check_*` function below
resolves the settings of the runs and tasks one table governs through the project's own loader
(`validate`, `run_settings`, `finetune_settings`, `task_grid`, `task_seeds`) and compares every
value the table states; a test runs each. `PINNED` names the leaves of `profiles.paper` each
check pins, and test_every_leaf_of_the_paper_profile_is_pinned_or_labelled walks every leaf of
the profile, and those it inherits of the shared pretraining, fine-tuning and analysis settings
(`INHERITED`): each is pinned (changing it makes its check fail: the test changes it and sees),
labelled where the project departs from the papers (src/maskbench/report/paper_departures.yaml,
which docs/paper-profile.md renders: tests/test_paper_departures.py), or says where and how a
job runs rather than what it computes (`NOT_RECIPE`), or is read by no table of the profile.
Its counts are derived, never kept."""

from __future__ import annotations

import fnmatch

import pytest

from maskbench.config import differences, read_yaml, resolved_run, run_tasks, schema_path, table_rows, validate
from maskbench.config.settings import PRETRAIN_OPERATIONAL, finetune_settings, run_settings, task_grid, task_seeds
from maskbench.config.tables import analysis_finetune_task, grid_arms, grid_cell
from maskbench.model.encoder import EncoderConfig
from maskbench.objectives.registry import encoder_settings
from maskbench.report.departures import load_departures
from maskbench.report.published import load_published
from tests.helpers import REPO


def paper_config(raw: dict | None = None) -> dict:
    raw = dict(raw or read_yaml(REPO / "params.yaml"), profile="paper")
    return validate(raw, read_yaml(schema_path()))


@pytest.fixture(scope="module")
def paper() -> dict:
    return paper_config()


def size(config: dict, run: str) -> dict:
    return config["model_sizes"][run_settings(config, run)["model"]]


def fine_tuning_values(config: dict, task: str) -> dict[str, set]:
    """Each fine-tuning setting of a task as the set of values its grid search tries (one value
    where the grid does not search it)."""
    settings, grid = finetune_settings(config, task), task_grid(config, task)
    return {key: set(grid.get(key, [value])) for key, value in settings.items()}


def subset(values: dict, keys) -> dict:
    return {k: values[k] for k in keys}


PUBLISHED_GRIDS = load_published()["grids"]
TAB6_TASKS = ["rmlm_mnli", "rmlm_qnli", "rmlm_qqp", "rmlm_rte"]
BASE = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072}
# fairseq's AdamW: weight decay on every parameter (both papers' official code)
FAIRSEQ = {"weight_decay_on": "all", "output_bias_init": "zero"}


# MAE-LM Tab. 3 (base column), App. A (12 layers x 768, a 4-layer decoder of the same width,
# 32,768 uncased subword units), App. D ("we apply 15% random masks", no 80/10/10) and App. C
# (absolute + relative positions in the encoder; the official code's post-LN blocks with an
# embedding LayerNorm and its decoder's input LayerNorm).
MAE_LM_TAB3 = {"steps": 125_000, "lr": 5e-4, "batch_size": 2048, "warmup_steps": 10_000, "seq_len": 512,
               "eps": 1e-6, "betas": [0.9, 0.98], "clip_norm": 2.0, "dropout": 0.1, "weight_decay": 0.01,
               "decay_power": 1.0, "end_lr": 0.0, "block_norm": "post", "model": "base-text", **FAIRSEQ}
MAE_LM_RUNS = ["mae_lm", "mae_lm_paper", "mae_lm_paper_d25", "mae_lm_paper_d50", "mae_lm_paper_d75",
               "mae_lm_paper_d100", "mae_lm_paper_dec1", "mae_lm_paper_dec2", "mae_lm_paper_misaligned",
               "mae_lm_paper_no_relative", "mae_lm_paper_resets_mask", "mae_lm_paper_random_replace",
               "mae_lm_paper_dec6", "mae_lm_paper_w512", "mae_lm_paper_w1024", "mae_lm_paper_self_cross",
               "mae_lm_paper_cross"]


def check_mae_lm_tab3_pretraining(config: dict, runs: list[str] | None = None) -> None:
    """MAE-LM Tab. 3, base: "the same set of hyperparameters ... for MAE-LM, RoBERTa (Ours) and
    ablations" (App. D), so its MLM baseline too; every one of them masks 15 % (App. D)."""
    for run in runs or ["mlm", "mlm_paper", *MAE_LM_RUNS]:
        assert subset(run_settings(config, run), MAE_LM_TAB3) == MAE_LM_TAB3, run
        assert size(config, run) == BASE, run
        assert config["runs"][run]["knobs"]["mask_ratio"] == 0.15, run
        assert config["runs"][run]["modality"] == "text", run
    assert config["tokenizer"]["text"]["vocab_size"] == 32_768 and config["tokenizer"]["text"]["lowercase"] is True
    assert config["runs"]["mlm_paper"]["objective"] == "mlm"
    assert run_settings(config, "mlm_paper")["positions"] == "absolute"   # RoBERTa's learned positions


def check_mae_lm_decoder_and_relative_positions(config: dict) -> None:
    """MAE-LM App. A: a 4-layer decoder (its Tab. 2 rows change the depth); Tab. 3: relative
    position buckets 32, max distance 128, in the encoder (App. C) of the paper's runs, over
    learned absolute positions."""
    for run in MAE_LM_RUNS:
        spec = config["runs"][run]
        assert spec["objective"] == "mae_lm" and spec["knobs"]["decoder_input_norm"] is True, run
        if run not in ("mae_lm_paper_dec1", "mae_lm_paper_dec2", "mae_lm_paper_dec6"):
            assert spec["knobs"]["decoder_layers"] == 4, run
        if run.startswith("mae_lm_paper") and run != "mae_lm_paper_no_relative":
            settings = run_settings(config, run)
            assert settings["positions"] == "absolute+relative_bias", run
            encoder = EncoderConfig(**encoder_settings(spec, settings["seq_len"], settings["positions"]))
            assert (encoder.relative_buckets, encoder.relative_max_distance) == (32, 128), run


# MAE-LM Tab. 2 (§4.3), each row against the base "enc. w/o. [MASK]; aligned position encoding
# w. relative position encoding; bi. self-attention; 4 layer, 768 dimension": what it changes
# (resolved knobs of table5's row); table5 adds a 1-layer decoder
MAE_LM_TAB2 = {
    "mae_lm_delta_25": {"knobs.delta": 0.25},                                          # Fig. 4's δ
    "mae_lm_delta_50": {"knobs.delta": 0.5},
    "mae_lm_delta_75": {"knobs.delta": 0.75},
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


def check_mae_lm_tab2_rows(config: dict) -> None:
    """MAE-LM Tab. 2: each ablation row changes the base (a 4-layer decoder as wide as the
    768-wide encoder, no [MASK] in the encoder, positions absolute + T5 relative bias) in what
    the paper names and nothing else; so the decoder rows ablate 4 → N."""
    rows = table_rows(config, "table5")
    base = resolved_run(config, rows["mae_lm"]["run"])
    assert (base["knobs.decoder_layers"], base["knobs.delta"], base["positions"]) == (4, 0.0, "absolute+relative_bias")
    assert "knobs.decoder_width" not in base and size(config, rows["mae_lm"]["run"])["n_embd"] == 768
    assert "mae_lm_decoder_4" not in rows  # the base itself
    # "enc. w. [MASK] (i.e., MLM)": MLM in the setting of MAE-LM's rows (its Tab. 3 runs)
    assert config["runs"][rows["mae_lm_mlm"]["run"]]["objective"] == "mlm" and "of" not in rows["mae_lm_mlm"]
    check_mae_lm_tab3_pretraining(config, [rows["mae_lm_mlm"]["run"]])
    for row_id, changes in MAE_LM_TAB2.items():
        mine = resolved_run(config, rows[row_id]["run"])
        assert rows[row_id].get("of", "mae_lm") == "mae_lm", row_id
        assert set(rows[row_id].get("changes", changes)) == set(changes), row_id
        assert {key: mine.get(key) for key in differences(config, rows[row_id]["run"], rows["mae_lm"]["run"])} == \
            changes, row_id


GLUE_LARGE, GLUE_SMALL = ("mnli", "qqp", "qnli", "sst2"), ("cola", "rte", "mrpc", "stsb")
# the papers' metrics on GLUE's dev sets (MAE-LM Tab. 1, ExLM Tab. 3): Matthews correlation for
# CoLA, Spearman for STS-B, accuracy otherwise (MNLI matched and mismatched)
GLUE_METRICS = {"cola": "matthews_corr", "stsb": "spearman"}


def check_glue_fine_tuning(config: dict) -> None:
    """MAE-LM Tab. 4 (base) = ExLM Tab. 11: the grids of the large and the small GLUE tasks,
    sequence length 512, no clipping, weight decay 0.01 on every parameter (fairseq's AdamW);
    medians of five seeds (MAE-LM App. D, ExLM Tab. 3), on GLUE's dev sets, [CLS] pooled
    (RoBERTa's classification head), batches of similar lengths (fairseq's batching by size)."""
    for task in [*GLUE_LARGE, *GLUE_SMALL]:
        values = fine_tuning_values(config, task)
        if task in GLUE_LARGE:
            expected = {"lr": {1e-5, 2e-5, 3e-5, 4e-5}, "batch_size": {32}, "epochs": {2, 3, 5},
                        "warmup_ratio": {0.06}}
        else:
            expected = {"lr": {2e-5, 3e-5, 4e-5, 5e-5}, "batch_size": {16, 32}, "epochs": {2, 3, 5, 10},
                        "warmup_ratio": {0.06, 0.1}}
        assert subset(values, expected) == expected, task
        assert values["max_len"] == {512} and values["clip_norm"] == {None} and values["weight_decay"] == {0.01}, task
        assert values["weight_decay_on"] == {"all"} and values["pooling"] == {"first"}, task
        assert values["group_by_length"] == {True} and values["max_train_examples"] == {None}, task
        assert values["max_eval_examples"] == {None}, task
        assert task_seeds(config, task) == [1, 2, 3, 4, 5], task
        assert config["tasks"][task].get("aggregate", "median") == "median", task
        check_glue_task(config, task, task, GLUE_METRICS.get(task, "accuracy"))
    assert config["tasks"]["mnli"]["extra_eval_splits"] == ["dev_mismatched"]   # MNLI-m/mm


def check_glue_task(config: dict, task: str, benchmark: str, metric: str) -> None:
    spec = config["tasks"][task]
    dataset = config["datasets"][spec["dataset"]]
    assert (dataset["benchmark"], dataset["source"]["repo"]) == (benchmark, "nyu-mll/glue"), task
    assert (spec["modality"], spec["metric"], spec["split"]) == ("text", metric, {"method": "predefined"}), task
    assert spec["kind"] == ("regression" if benchmark == "stsb" else "classification"), task


def check_squad_fine_tuning(config: dict) -> None:
    """MAE-LM Tab. 5 = ExLM Tab. 11, SQuAD 2.0: lr {2,3,4,5}e-5, batch {16, 32}, epochs {2, 3},
    warmup {6 %, 10 %}, sequence length 512, no clipping, weight decay 0.01; F1 (and EM) on
    the dev set, medians of five seeds."""
    values = fine_tuning_values(config, "squad_v2")
    assert subset(values, ("lr", "batch_size", "epochs", "warmup_ratio")) == {
        "lr": {2e-5, 3e-5, 4e-5, 5e-5}, "batch_size": {16, 32}, "epochs": {2, 3}, "warmup_ratio": {0.06, 0.1}}
    assert values["max_len"] == {512} and values["clip_norm"] == {None} and values["weight_decay"] == {0.01}
    spec = config["tasks"]["squad_v2"]
    assert (spec["metric"], spec["kind"], spec["split"], spec["modality"]) == \
        ("squad_v2_f1", "qa", {"method": "predefined"}, "text")
    assert config["datasets"][spec["dataset"]]["source"]["repo"] == "rajpurkar/squad_v2"
    assert task_seeds(config, "squad_v2") == [1, 2, 3, 4, 5]


# ExLM Tab. 5 (App. B.1): Repeated MLM and "the ablation experiments" in its setting
EXLM_TAB5 = {"lr": 2e-3, "warmup_steps": 5000, "steps": 50_000, "batch_size": 4096, "dropout": 0.1,
             "betas": [0.9, 0.98], "weight_decay": 0.01, "clip_norm": None, "decay_power": 1.0, "seq_len": 512,
             "block_norm": "pre", "model": "base-text", **FAIRSEQ}
TAB5_RUNS = ["repeated_mlm", "mlm_p2", "mlm_p15", "mlm_p39", "mlm_p62", "mlm_p79", "rmlm_k2_p39", "rmlm_k2_p62",
             "rmlm_k2_p79", "rmlm_k4_p39", "rmlm_k4_p62", "rmlm_k4_p79", "rmlm_k8_p62", "rmlm_k8_p79", "exlm_k2_p15",
             "exlm_k4_p15", "exlm_k8_p15", "exlm_k2_p39", "exlm_k4_p39", "exlm_k8_p39", "exlm_k4_p15_no_rope2d",
             "exlm_k4_p15_no_transitions", "exlm_k4_p15_sparse", "exlm_k4_p15_no_transitions_ctc", "exlm_k4_p15_gated"]


def check_exlm_tab5_repeated_mlm_setting(config: dict) -> None:
    """ExLM Tab. 5: lr 2e-3, 5K warmup, 50K steps, 4,096 sequences, dropout 0.1, 12 x 768 x
    3,072, (0.9, 0.98), weight decay 0.01, clip norm 0.0 (fairseq: off); App. B.1: "Max sequence
    length ... 512 * k" for Repeated MLM (its position table), 512 for every other run."""
    for run in TAB5_RUNS:
        settings = run_settings(config, run)
        assert subset(settings, EXLM_TAB5) == EXLM_TAB5, run
        assert size(config, run) == BASE, run
        spec = config["runs"][run]
        assert spec["modality"] == "text", run
        k = spec["knobs"]["k"] if spec["objective"] == "repeated_mlm" else 1
        encoder = EncoderConfig(**encoder_settings(spec, settings["seq_len"], settings["positions"]))
        assert encoder.max_position == 512 * k, run


def check_exlm_text_grids(config: dict) -> None:
    """The (k, p) grids of ExLM's text experiments, run by run: table2's arms are the cells of
    Fig. 3 (k = 1 plain MLM, else Repeated MLM), table3's those of Tab. 4 (k = 1 MLM, else ExLM
    with k states), each on the objective its cell names."""
    grids = PUBLISHED_GRIDS
    for table, figure, objective in (("table2", "exlm_fig3", "repeated_mlm"), ("table3", "exlm_table4", "exlm")):
        cells = {(int(k), p) for k, by_p in grids[figure]["cells"]["mnli"].items() for p in by_p}
        arms = grid_arms(config, table)
        assert sorted(grid_cell(config["runs"][run]) for run in arms) == sorted(cells), table
        for run in arms:
            k, _ = grid_cell(config["runs"][run])
            assert config["runs"][run]["objective"] == ("mlm" if k == 1 else objective), run
    assert config["tables"]["table2"]["tasks"] == config["tables"]["table3"]["tasks"] == TAB6_TASKS
    assert config["tables"]["table3"]["case_study"] == "exlm_k4_p15"   # ExLM Fig. 10's DAG: k = 4


def check_exlm_transitions(config: dict) -> None:
    """ExLM §3, Eq. 4-6: every text ExLM run but table5's ablations scores its transitions over
    the dense DAG (every state to every later state) from the states themselves (Q Kᵀ), with
    2-D RoPE (the shared RoPE plus the clone index)."""
    for run in ("exlm", "exlm_k2_p15", "exlm_k4_p15", "exlm_k8_p15", "exlm_k2_p39", "exlm_k4_p39", "exlm_k8_p39"):
        knobs = config["runs"][run]["knobs"]
        assert config["runs"][run]["objective"] == "exlm", run
        assert (knobs["transitions"], knobs["transition_input"], knobs["rope2d"]) == ("dense", "states", True), run
        assert run_settings(config, run)["positions"] == "rope", run


# ExLM Tab. 2 and 13 rows: what each changes of its base (ExLM, k = 4, p = 15 %)
EXLM_TAB2 = {"exlm_no_rope2d": {"knobs.rope2d": False}, "exlm_no_transitions": {"knobs.transitions": "none"},
             "exlm_no_transitions_ctc": {"knobs.transitions": "ctc"},
             "exlm_sparse_dag": {"knobs.transitions": "sparse"},
             "exlm_gated_transitions": {"knobs.transition_heads": "encoder",
                                        "knobs.transition_input": "states+position"},
             "vanilla_mlm_pp": {"steps": 95_250}}


def check_exlm_tab2_rows(config: dict) -> None:
    """ExLM Tab. 2, 13 (and the official code's readings of two rows): each row of table5 changes
    its base in what the paper (or the official code) names; Vanilla MLM++ is MLM at k = 1,
    15 % trained longer; the gated row has the official code's slot positions
    (`links_feature: feature:position`)."""
    rows = table_rows(config, "table5")
    for row_id, changes in EXLM_TAB2.items():
        base = rows[row_id].get("of", "exlm")
        mine = resolved_run(config, rows[row_id]["run"])
        assert {key: mine.get(key) for key in differences(config, rows[row_id]["run"], rows[base]["run"])} == \
            changes, row_id
        assert set(rows[row_id].get("changes", changes)) == set(changes), row_id
    assert (rows["exlm"]["run"], rows["vanilla_mlm"]["run"]) == ("exlm_k4_p15", "mlm_p15")


def check_exlm_tab5_vanilla_mlm_pp(config: dict) -> None:
    """ExLM App. Q.2, Tab. 12: Vanilla MLM++ costs what ExLM (k = 4) costs, 104.2 / 54.7 A100
    hours = 1.905 x the Tab. 5 steps (the paper rounds to 100K: a labelled departure);
    otherwise the Tab. 5 setting."""
    settings = run_settings(config, "mlm_pp_tab5")
    assert settings["steps"] == round(50_000 * 104.2 / 54.7, -1) == 95_250
    assert subset(settings, set(EXLM_TAB5) - {"steps"}) == {k: v for k, v in EXLM_TAB5.items() if k != "steps"}
    spec = config["runs"]["mlm_pp_tab5"]
    assert (spec["modality"], spec["objective"], spec["knobs"]) == ("text", "mlm", {"mask_ratio": 0.15})


def check_exlm_tab6_fine_tuning(config: dict) -> None:
    """ExLM Tab. 6: MNLI, QNLI, QQP, RTE at lr 5e-5, batch 32, 3 epochs, 6 % warmup, seeds
    {1, 2, 3}, the mean of the three (App. B.2); one setting, no grid; accuracy on dev."""
    for task in TAB6_TASKS:
        values = fine_tuning_values(config, task)
        assert subset(values, ("lr", "batch_size", "epochs", "warmup_ratio")) == {
            "lr": {5e-5}, "batch_size": {32}, "epochs": {3}, "warmup_ratio": {0.06}}, task
        assert task_grid(config, task) == {}, task
        assert task_seeds(config, task) == [1, 2, 3] and config["tasks"][task]["aggregate"] == "mean", task
        check_glue_task(config, task, task.removeprefix("rmlm_"), "accuracy")


# MAE-LM Fig. 4: δ = 0 (MAE-LM), 0.25, 0.5, 0.75, 1, on the GLUE average and SQuAD 2.0
MAE_LM_FIG4_ROWS = ("mae_lm", "mae_lm_delta_25", "mae_lm_delta_50", "mae_lm_delta_75", "mae_lm_delta_100")
EXLM_TAB2_ROWS = ("vanilla_mlm", "vanilla_mlm_pp", "exlm", "exlm_no_rope2d", "exlm_no_transitions",
                  "exlm_no_transitions_ctc", "exlm_sparse_dag", "exlm_gated_transitions")


def check_table5_protocols(config: dict) -> None:
    """ExLM Tab. 2 and 13 report MNLI, QNLI, QQP, RTE, and their Vanilla MLM numbers are those
    of Tab. 4 and Fig. 3: Tab. 6's protocol (one setting, means of 3 seeds), the tasks tables 2
    and 3 use. MAE-LM Tab. 2's rows: the GLUE average of its Tab. 4 fine-tuning (8 tasks); its
    Fig. 4's δ series (δ = 0 to 1) also SQuAD 2.0 (its Tab. 5), the claim's second part. The
    `none` control is fine-tuned on all, so every row has its control."""
    for row_id, row in table_rows(config, "table5").items():
        expected = (TAB6_TASKS if row_id in EXLM_TAB2_ROWS else [*GLUE_LARGE, *GLUE_SMALL, "squad_v2"]
                    if row_id in MAE_LM_FIG4_ROWS else [*GLUE_LARGE, *GLUE_SMALL])
        assert sorted(run_tasks(config, "table5", row["run"])) == sorted(expected), row_id
    assert sorted(run_tasks(config, "table5", "none")) == sorted([*GLUE_LARGE, *GLUE_SMALL, "squad_v2", *TAB6_TASKS])
    delta = next(c for c in load_published()["claims"] if c["id"] == "maelm_delta_degrades")
    assert [pair[0] for pair in delta["pairs"]] + [delta["pairs"][-1][1]] == list(MAE_LM_FIG4_ROWS)
    assert delta["apart"] == ["squad_v2"]   # Fig. 4's two halves, each a part of the claim
    row_runs = [row["run"] for row in table_rows(config, "table5").values()]
    assert sorted(config["tables"]["table5"]["runs"]) == sorted(["none", *row_runs])


def smiles_runs(config: dict) -> list[str]:
    """The SMILES runs the profile's tables read (table5's SMILES ablations are the other
    profiles': the paper's table5 is on text)."""
    read = {run for table in config["tables"].values() for run in table.get("runs", [])}
    return sorted(run for run in read if config["runs"][run]["modality"] == "smiles")


def check_exlm_tab7_molecular_pretraining(config: dict) -> None:
    """ExLM Tab. 7 (App. J): lr 5e-4, 10K warmup, 120K steps, 64K tokens a batch, dropout 0.1,
    9 layers x 768 x 2,048 with 12 heads, (0.9, 0.98), weight decay 0.0, clip norm 1.0; its
    SMILES-BERT has "the same training hyperparameters as ExLM" (App. L): every SMILES run of a table."""
    expected = {"lr": 5e-4, "warmup_steps": 10_000, "steps": 120_000, "dropout": 0.1, "betas": [0.9, 0.98],
                "weight_decay": 0.0, "clip_norm": 1.0, "block_norm": "pre", "model": "base-smiles", **FAIRSEQ}
    for run in smiles_runs(config):
        settings = run_settings(config, run)
        assert subset(settings, expected) == expected, run
        assert settings["batch_size"] * settings["seq_len"] == 64 * 1024, run
        assert size(config, run) == {"n_layer": 9, "n_embd": 768, "n_head": 12, "n_inner": 2048}, run


def check_exlm_tab7_expanded_states(config: dict) -> None:
    """ExLM Tab. 7: 2 expanded states, fragments drop ratio 0.15 (its Tab. 1 row); ExLM's
    transitions from the states, over the dense DAG, 2-D RoPE."""
    knobs = config["runs"]["smiles_exlm"]["knobs"]
    assert (knobs["k"], knobs["mask_ratio"], knobs["transitions"], knobs["transition_input"], knobs["rope2d"]) == \
        (2, 0.15, "dense", "states", True)
    assert config["runs"]["smiles_mlm"]["knobs"]["mask_ratio"] == 0.15


# ExLM Tab. 8: epochs, batch size, learning rate, warmup ratio, pooler dropout per task
EXLM_TAB8 = {"bace": (60, 64, 1e-4, 0.06, 0.2), "bbbp": (40, 128, 4e-4, 0.06, 0.1), "tox21": (80, 128, 1e-4, 0.06, 0.1),
             "sider": (100, 32, 5e-4, 0.4, 0.0), "muv": (40, 128, 2e-5, 0.2, 0.1),
             "clintox": (100, 256, 5e-5, 0.1, 0.5), "toxcast": (80, 64, 1e-4, 0.06, 0.1)}


def check_exlm_tab8_molecular_fine_tuning(config: dict) -> None:
    """ExLM Tab. 8 (App. K): each MoleculeNet set's epochs, batch, lr, warmup and pooler dropout,
    three seeds averaged, ROC-AUC; dropout 0.1 is the encoder's (pretraining's 0.1, kept)."""
    for task, expected in EXLM_TAB8.items():
        settings = finetune_settings(config, task)
        assert tuple(settings[k] for k in ("epochs", "batch_size", "lr", "warmup_ratio", "pooler_dropout")) == \
            expected, task
        assert task_grid(config, task) == {} and task_seeds(config, task) == [1, 2, 3], task
        spec = config["tasks"][task]
        assert (spec["modality"], spec["metric"], spec["kind"]) == ("smiles", "roc_auc", "multitask_classification")
        assert config["datasets"][spec["dataset"]]["benchmark"] == task
    assert run_settings(config, "smiles_exlm")["dropout"] == 0.1


def check_exlm_tab10_textual_pretraining(config: dict) -> None:
    """ExLM Tab. 10 (App. N): lr 5e-4, 10K warmup, 125K steps, 2,048 sequences, 4 expanded
    states, dropout 0.1, 12 x 768 x 3,072, (0.9, 0.98), mask ratio 0.15, weight decay 0.01,
    clip norm 0.0 (off); pre-LN as its official code."""
    expected = {"lr": 5e-4, "warmup_steps": 10_000, "steps": 125_000, "batch_size": 2048, "dropout": 0.1,
                "betas": [0.9, 0.98], "weight_decay": 0.01, "clip_norm": None, "decay_power": 1.0,
                "block_norm": "pre", "seq_len": 512, "model": "base-text", **FAIRSEQ}
    assert subset(run_settings(config, "exlm"), expected) == expected
    assert size(config, "exlm") == BASE
    assert config["runs"]["exlm"]["knobs"]["k"] == 4 and config["runs"]["exlm"]["knobs"]["mask_ratio"] == 0.15


def check_rope_base(config: dict) -> None:
    """ExLM's RoPE (its official code's rotary embedding, ESM-2's) turns at RoFormer's base
    10,000 in every run that reads RoPE."""
    for run in config["runs"]:
        settings = run_settings(config, run)
        if "rope" in settings["positions"]:
            assert settings["rope_base"] == 10_000, run


def check_look_around_setup(config: dict) -> None:
    """Look Around §5: variable-length MLM samples the mask ratio uniformly from [0.15, 0.3] and
    is compared with fixed 0.15 and 0.3 (Tab. 7); the AR objectives are fine-tuned on the eight
    GLUE tasks (Tab. 2) and scored with its metrics: F1 for QQP and MRPC, Pearson for STS-B,
    Matthews correlation for CoLA, accuracy otherwise."""
    runs = config["runs"]
    assert (runs["varlen_mlm"]["knobs"]["mask_ratio_min"], runs["varlen_mlm"]["knobs"]["mask_ratio_max"]) == (0.15, 0.3)
    assert runs["mlm"]["knobs"]["mask_ratio"] == 0.15 and runs["mlm_p30"]["knobs"]["mask_ratio"] == 0.3
    table7 = config["tables"]["table7"]
    assert {"ar", "dar", "mlm", "mlm_p30", "varlen_mlm"} <= set(table7["runs"])
    headline = {config["datasets"][config["tasks"][t]["dataset"]]["benchmark"]: config["tasks"][t]["metric"]
                for t in table7["tasks"]}
    assert headline == {"qqp": "f1", "mrpc": "f1", "stsb": "pearson", "cola": "matthews_corr",
                        "mnli": "accuracy", "qnli": "accuracy", "sst2": "accuracy", "rte": "accuracy"}


def check_whole_documents(config: dict) -> None:
    """MAE-LM's official code cuts its pretraining blocks with fairseq's `complete_doc` (a block
    never spans two documents) and ExLM App. J trains one molecule a sample (Uni-Mol's data), so
    every paper run, text and SMILES alike (the arms of a table read the same blocks), reads one
    document, or one piece of a longer one, a block; at most 64K tokens a SMILES step (Tab. 7's
    "max tokens 64K": 512 molecules of at most 128 tokens)."""
    for run in config["runs"]:
        assert run_settings(config, run)["blocks"] == "documents", run


def check_paper_tables(config: dict) -> None:
    """Which paper each table reproduces: table1 the objectives of ExLM Tab. 1, 3 and MAE-LM
    Tab. 1 (MLM, MAE-LM, ExLM and the controls; GLUE, SQuAD 2.0, MoleculeNet), table4 ExLM Tab.
    1's MoleculeNet sets, table6 MAE-LM Fig. 1, 5's MLM, MAE-LM and ExLM."""
    tables = config["tables"]
    assert tables["table1"]["runs"] == ["none", "mlm", "mae_lm", "exlm", "smiles_none", "smiles_mlm", "smiles_exlm"]
    assert tables["table1"]["tasks"] == [*GLUE_LARGE, *GLUE_SMALL, "squad_v2", *EXLM_TAB8]
    assert set(EXLM_TAB8) <= set(tables["table4"]["tasks"])
    assert tables["table6"]["runs"] == ["mlm", "mae_lm", "exlm"]
    assert config["runs"]["none"]["objective"] == "none" and config["runs"]["smiles_none"]["objective"] == "none"


def check_mae_lm_effective_rank(config: dict) -> None:
    """MAE-LM §2: the 0.9-effective rank; §4.4, Fig. 5b: the rank "after further finetuning on
    MNLI", of the text runs table6 shows (GLUE's MNLI, by its Tab. 4 grid)."""
    assert config["analysis"]["rank_threshold"] == 0.9
    for run in config["tables"]["table6"]["runs"]:
        assert analysis_finetune_task(config, run) == "mnli", run
    check_glue_task(config, "mnli", "mnli", "accuracy")


def check_exlm_case_study(config: dict) -> None:
    """ExLM Fig. 7, 10: the DAG of "This is [MASK], and I'm very [MASK] to see this." at k = 4."""
    assert config["analysis"]["case_study"]["text"] == "This is [MASK], and I'm very [MASK] to see this."
    assert config["runs"][config["tables"]["table3"]["case_study"]]["knobs"]["k"] == 4


CHECKS = [check_mae_lm_tab3_pretraining, check_mae_lm_decoder_and_relative_positions, check_mae_lm_tab2_rows,
          check_glue_fine_tuning, check_squad_fine_tuning, check_exlm_tab5_repeated_mlm_setting, check_exlm_text_grids,
          check_exlm_transitions, check_exlm_tab2_rows, check_exlm_tab5_vanilla_mlm_pp, check_exlm_tab6_fine_tuning,
          check_table5_protocols, check_exlm_tab7_molecular_pretraining, check_exlm_tab7_expanded_states,
          check_exlm_tab8_molecular_fine_tuning, check_exlm_tab10_textual_pretraining, check_rope_base,
          check_look_around_setup, check_whole_documents, check_paper_tables, check_mae_lm_effective_rank,
          check_exlm_case_study]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
def test_the_paper_profile_matches_the_papers_tables(paper, check):
    check(paper)


def test_mae_lm_tab4_adam_of_fine_tuning(paper):
    """MAE-LM Tab. 4-5: Adam ε 1e-6, (β1, β2) = (0.9, 0.98), weight decay 0.01 on every
    parameter: the optimizer fine-tuning builds (`finetune_optimizer`, which the loop calls)
    under the paper's settings of each text task."""
    import torch

    from maskbench.finetune.loop import finetune_optimizer

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    for task in [*GLUE_LARGE, *GLUE_SMALL, "squad_v2"]:
        optimizer = finetune_optimizer(model, finetune_settings(paper, task))
        assert isinstance(optimizer, torch.optim.AdamW)
        decayed = [group for group in optimizer.param_groups if group["params"]]
        assert [(g["betas"], g["eps"], g["weight_decay"], len(g["params"])) for g in decayed] == \
            [((0.9, 0.98), 1e-6, 0.01, 4)], task


def test_dropout_placement_and_the_mae_lm_decoder_without_dropout(paper):
    """ExLM Tab. 5, 7, 10: FFN dropout 0.1, attention dropout 0.1, activation dropout 0 (fairseq's
    placement: on the embeddings, the attention probabilities, and each sublayer's output before
    the residual sum, none after the activation); MAE-LM App. D: "dropout is applied to the
    encoder but not the decoder". Built from the paper profile's MAE-LM run."""
    import torch

    from maskbench.model.encoder import MLP, Encoder, SelfAttention
    from maskbench.objectives.mae_lm import ShallowDecoder

    settings = run_settings(paper, "mae_lm_paper")
    config = EncoderConfig(vocab_size=64, dropout=settings["dropout"], n_layer=2, n_embd=24, n_head=2, n_inner=48,
                           **encoder_settings(paper["runs"]["mae_lm_paper"], 16, settings["positions"]))
    encoder = Encoder(config)
    assert encoder.drop.p == 0.1
    for block in encoder.blocks:
        assert block.attn.dropout == 0.1 and block.attn.resid_dropout.p == 0.1          # probabilities, output
        drops = [m for m in block.mlp.modules() if isinstance(m, torch.nn.Dropout)]
        assert [m.p for m in drops] == [0.1] and block.mlp.dropout is drops[0]          # the FFN's output only
    mlp = MLP(config).train()
    mlp.dropout.p = 1.0   # dropout on the output: a train-mode MLP then outputs zeros
    assert torch.count_nonzero(mlp(torch.randn(3, 24))) == 0
    decoder = ShallowDecoder(config, n_layer=2)
    assert all(m.p == 0.0 for m in decoder.modules() if isinstance(m, torch.nn.Dropout))
    assert all(m.dropout == 0.0 for m in decoder.modules() if isinstance(m, SelfAttention))


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


def profile_leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """Every leaf of a params tree by its dotted path (a list is one leaf)."""
    leaves = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        leaves.update(profile_leaves(value, path + ".") if isinstance(value, dict) and value else {path: value})
    return leaves


# The recipe's shared settings: the leaves the paper profile inherits from the other profiles
# under these are walked too (a value it does not set is still the paper's recipe)
INHERITED = (("pretrain",), ("finetune", "settings"), ("analysis",), ("generation_perplexity",), ("controls",),
             ("verdicts",))


def paper_leaves(raw: dict) -> dict[str, object]:
    """The leaves `profiles.paper` sets in params.yaml (YAML's anchors and merge keys expanded),
    and those it inherits under INHERITED, as the profile resolves them."""
    config = paper_config(raw)
    inherited = {}
    for keys in INHERITED:
        node = config
        for key in keys:
            node = node[key]
        inherited.update(profile_leaves(node, "".join(f"{key}." for key in keys)))
    return {**inherited, **profile_leaves(raw["profiles"]["paper"])}


# The leaves of `profiles.paper` each check pins (fnmatch patterns over their dotted paths):
# test_every_leaf_of_the_paper_profile_is_pinned_or_labelled changes each leaf a pattern matches
# and requires one of its checks to fail.
PINNED = {
    check_mae_lm_tab3_pretraining: [
        "pretrain.batch_size", "pretrain.block_norm", "pretrain.clip_norm", "pretrain.dropout", "pretrain.lr",
        "pretrain.model", "pretrain.output_bias_init", "pretrain.seq_len", "pretrain.steps", "pretrain.warmup_steps",
        "pretrain.weight_decay_on", "tokenizer.text.vocab_size", "tokenizer.text.lowercase",
        "runs.mae_lm*.knobs.mask_ratio", "runs.mae_lm*.modality", "runs.mae_lm*.overrides.positions",
        "pretrain.betas", "pretrain.eps", "pretrain.weight_decay", "pretrain.decay_power", "pretrain.end_lr"],
    check_mae_lm_decoder_and_relative_positions: [
        "runs.mae_lm*.knobs.decoder_input_norm", "runs.mae_lm*.knobs.decoder_layers", "runs.mae_lm*.objective",
        "runs.mae_lm*.overrides.positions"],
    check_mae_lm_tab2_rows: ["runs.mae_lm_paper*.knobs.*", "runs.mae_lm_paper_no_relative.overrides.positions",
                             "tables.table5.rows.mae_lm*.run", "tables.table5.rows.mae_lm*.of",
                             "tables.table5.rows.mae_lm*.changes", "tables.table5.rows.mae_lm_decoder_4"],
    check_glue_fine_tuning: ["finetune.grid.*", "finetune.seeds", "finetune.settings.batch_size",
                             "finetune.settings.clip_norm", "finetune.settings.max_len",
                             "finetune.settings.weight_decay",
                             "finetune.settings.weight_decay_on", "finetune.settings.pooling",
                             "finetune.settings.max_train_examples", "finetune.settings.max_eval_examples",
                             "finetune.settings.group_by_length", "finetune.settings.warmup_ratio",
                             *(f"tasks.{task}.*" for task in [*GLUE_LARGE, *GLUE_SMALL])],
    check_squad_fine_tuning: ["tasks.squad_v2.*"],
    check_exlm_tab5_repeated_mlm_setting: [f"runs.{run}.*" for run in TAB5_RUNS],
    check_exlm_text_grids: ["runs.mlm_p*.knobs.mask_ratio", "runs.rmlm_*.knobs.*", "runs.exlm_k?_p??.knobs.k",
                            "runs.exlm_k?_p??.knobs.mask_ratio", "runs.mlm_p*.objective", "runs.rmlm_*.objective",
                            "runs.exlm_k?_p??.objective", "tables.table2.*", "tables.table3.*"],
    check_exlm_transitions: ["runs.exlm*.knobs.transitions", "runs.exlm*.knobs.transition_input",
                             "runs.exlm*.knobs.rope2d", "runs.exlm_k?_p??.objective"],
    check_exlm_tab2_rows: ["runs.exlm_k4_p15_*.knobs.*", "runs.mlm_pp_tab5.overrides.steps",
                           "tables.table5.rows.exlm*.run", "tables.table5.rows.exlm*.changes",
                           "tables.table5.rows.vanilla_mlm*.run"],
    check_exlm_tab5_vanilla_mlm_pp: ["runs.mlm_pp_tab5.*"],
    check_exlm_tab6_fine_tuning: ["tasks.rmlm_*"],
    check_table5_protocols: ["tables.table5.rows.*.tasks", "tables.table5.runs", "tables.table5.tasks"],
    check_exlm_tab7_molecular_pretraining: ["runs.smiles_*.overrides.*"],
    check_exlm_tab7_expanded_states: ["runs.smiles_exlm.knobs.*"],
    check_exlm_tab8_molecular_fine_tuning: [
        *(f"tasks.{task}.{key}" for task in EXLM_TAB8 for key in ("overrides.*", "grid", "seeds", "dataset")),
        *(f"tasks.{task}.{key}" for task in ("tox21", "sider", "muv", "toxcast")
          for key in ("modality", "metric", "kind"))],
    check_exlm_tab10_textual_pretraining: ["runs.exlm.*"],
    check_rope_base: ["pretrain.rope_base"],
    check_look_around_setup: ["tables.table7.tasks", "tasks.la_*.metric"],
    check_whole_documents: ["pretrain.blocks"],
    check_paper_tables: ["tables.table1.runs", "tables.table1.tasks", "tables.table4.tasks", "tables.table6.runs"],
    check_mae_lm_effective_rank: ["analysis.rank_threshold", "analysis.finetune_task.text"],
    check_exlm_case_study: ["analysis.case_study.text"],
}

# Leaves that say where, how or under what name a job runs, not what it computes
NOT_RECIPE = {
    "launch.*": "processes per run: scheduling only (settings.launch_settings)",
    "resources.*": "what a job asks a scheduler for",
    **{f"{where}.{key}": "where and how a run computes (settings.PRETRAIN_OPERATIONAL)"
       for where in ("pretrain", "runs.*.overrides") for key in PRETRAIN_OPERATIONAL},
    "finetune.settings.device": "where fine-tuning runs", "finetune.settings.threads": "where fine-tuning runs",
    "tasks.*.label": "a name the report prints", "tables.*.title": "a name the report prints",
    "tables.table5.rows.*.label": "a name the report prints",
    "tasks.*.also_report": "a metric printed beside the headline one",
    "pretrain.eval_blocks": "the validation blocks pretraining's own loss curve reads",
    "pretrain.precision": "the arithmetic's precision (auto: bf16 autocast on a GPU; the papers' tables state none)",
    "finetune.settings.precision": "the arithmetic's precision (as pretraining's)",
    "pretrain.seeds": "each run's one pretraining seed (the papers pretrain each run once and state no seed)",
    "controls.*": "the linear models of this project's controls (ECFP baselines, probes); no paper has them",
    "verdicts.*": "how this project decides a claim (docs/verdicts.md); the papers state no such rule",
}


def built_runs(config: dict) -> set[str]:
    """The runs some table of the profile reads: the others are never pretrained under it."""
    return {run for table in config["tables"] for row in [config["tables"][table]] for run in row.get("runs", [])}


def unshared(tree):
    """A copy of a params tree in which no two paths share a dict or list (YAML's anchors make
    them share), so changing one leaf changes nothing else."""
    if isinstance(tree, dict):
        return {key: unshared(value) for key, value in tree.items()}
    return [unshared(value) for value in tree] if isinstance(tree, list) else tree


def mutant(value):
    """Another value of a leaf, of its kind where it has one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, list):
        return [mutant(value[0]), *value[1:]] if value else [1]
    return {"lr": [1.0]} if value == {} else 1


def fails(check, config: dict) -> bool:
    try:
        check(config)
    except Exception:  # an AssertionError, or a lookup the changed value breaks
        return True
    return False


def matching(path: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def unread(config: dict, keys: list[str]) -> bool:
    """A shared setting no table of the profile reads: a fine-tuning setting each of the tables'
    tasks sets for itself (its grid or overrides), or an analysis setting of a modality whose
    analyses no table shows (table6's ranks, table3's case study)."""
    if keys[:2] == ["finetune", "settings"]:
        tasks = {task for table in config["tables"].values() for task in table.get("tasks", [])}
        return all(keys[2] in task_grid(config, task) or keys[2] in config["tasks"][task].get("overrides", {})
                   for task in tasks)
    if keys[0] == "analysis" and keys[-1] in ("text", "smiles"):
        shown = [*config["tables"]["table6"]["runs"], config["tables"]["table3"]["case_study"]]
        return keys[-1] not in {config["runs"][run]["modality"] for run in shown}
    return False


def leaf_accounts(raw: dict) -> dict[str, list[str]]:
    """Every leaf of `profiles.paper` by how it is accounted for: `pinned` (one of its checks
    fails when it changes), `labelled` (a departure names it), `not_recipe`, `not_built` (under a
    run no table reads, or `unread`); `unpinned` (declared pinned, but its checks pass when it
    changes) and `unaccounted` must stay empty."""
    config = unshared(paper_config(raw))
    built = built_runs(config)
    departures = [pattern for d in load_departures() for pattern in d["params"]]
    accounts = {name: [] for name in ("pinned", "labelled", "not_recipe", "not_built", "unpinned", "unaccounted")}
    for path in paper_leaves(raw):
        keys = path.split(".")
        if matching(path, departures):
            accounts["labelled"].append(path)
        if matching(path, NOT_RECIPE) or (keys[0] == "runs" and keys[1] not in built) or unread(config, keys):
            accounts["not_recipe" if matching(path, NOT_RECIPE) else "not_built"].append(path)
            continue
        checks = [check for check, patterns in PINNED.items() if matching(path, patterns)]
        if checks:
            *parents, last = keys
            node = config
            for key in parents:
                node = node[key]
            original = node[last]
            node[last] = mutant(original)
            caught = any(fails(check, config) for check in checks)
            node[last] = original
            accounts["pinned" if caught else "unpinned"].append(path)
        elif not matching(path, departures):
            accounts["unaccounted"].append(path)
    return accounts


def test_every_leaf_of_the_paper_profile_is_pinned_or_labelled(raw_params):
    """Every value `profiles.paper` sets is pinned by a check (changing it fails the check),
    labelled as a departure, or not part of what is computed; a new leaf fails here until one of
    these says what it is."""
    accounts = leaf_accounts(raw_params)
    assert accounts["unpinned"] == [], "declared pinned, but no check fails when these change"
    assert accounts["unaccounted"] == [], "neither pinned by a check nor labelled in paper_departures.yaml"
    leaves = paper_leaves(raw_params)
    counted = set().union(*(accounts[name] for name in ("pinned", "labelled", "not_recipe", "not_built")))
    assert counted == set(leaves)
    # no pattern outlives the leaves it was written for
    patterns = [*(p for ps in PINNED.values() for p in ps), *(p for d in load_departures() for p in d["params"])]
    assert [pattern for pattern in patterns if not any(fnmatch.fnmatchcase(leaf, pattern) for leaf in leaves)] == []


def test_the_walk_catches_an_unpinned_leaf_and_a_pin_no_check_reads(raw_params, monkeypatch):
    """A value the profile starts to set that no check pins and no departure labels (the
    fine-tuning's dev-curve points, here) is unaccounted; a pinned value no check reads is
    unpinned; a value the profile inherits is walked too (the text head's dropout, unaccounted
    without its departure)."""
    raw_params["profiles"]["paper"]["tracking"] = {"dev_curve_points": 4}
    raw_params["profiles"]["paper"]["runs"]["exlm"]["knobs"]["next_token_prior"] = 0.0
    accounts = leaf_accounts(raw_params)
    assert accounts["unaccounted"] == ["tracking.dev_curve_points"]
    assert accounts["unpinned"] == ["runs.exlm.knobs.next_token_prior"]
    assert "pooler_dropout" not in str(raw_params["profiles"]["paper"]["finetune"])   # inherited
    kept = tuple(d for d in load_departures() if d["id"] != "text_head_dropout")
    monkeypatch.setitem(globals(), "load_departures", lambda: kept)
    assert leaf_accounts(raw_params)["unaccounted"] == [
        "finetune.settings.pooler_dropout", "tracking.dev_curve_points"]
