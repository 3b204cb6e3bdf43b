"""The real pretraining loop (`maskbench.train.pretrain.pretrain`) for every run of params.yaml,
each followed by the real fine-tuning entry point on a tiny task; what pretraining saves;
gradient accumulation; the progress bar; and the optional torch.compile and bf16 paths."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from mlflow import MlflowClient
from safetensors.torch import load_file
from transformers import AutoTokenizer

from maskbench.config import ParamsError
from maskbench.device import compute_device
from maskbench.finetune.loop import finetune
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.cards import card
from maskbench.train import pretrain as pretrain_module
from maskbench.train.blocks import block_source
from maskbench.train.pretrain import init_output_bias, setup
from tests.helpers import RAW_PARAMS, finetune_outputs, run_pretrain, smoke_config, tiny_documents

RUNS = sorted(r for r, spec in RAW_PARAMS["runs"].items()
              if card(spec["objective"]).pretrains)  # none: test_controls.py


def code_path(run: str) -> tuple[str, str]:
    """What decides which code a run's pretraining takes: its objective and, for ExLM, the
    reading of its transitions (each builds other heads); the other knobs are sizes."""
    spec = RAW_PARAMS["runs"][run]
    return spec["objective"], spec.get("knobs", {}).get("transitions", "") if spec["objective"] == "exlm" else ""


def settings_but_numbers(spec):
    """A run's settings with every number left out (sizes, ratios, k, steps, lengths): what
    else it sets (booleans, names, position schemes) can take other code; other numbers cannot."""
    if isinstance(spec, dict):
        return {k: settings_but_numbers(v) for k, v in spec.items() if k != "description"
                and not (isinstance(v, (int, float)) and not isinstance(v, bool))}
    return spec


def first_of_each_code_path(runs: list[str]) -> list:
    """The test cases: the first run of each code path in the fast suite, then, as slow cases,
    the first run of each other combination of non-numeric settings. A run that differs from
    one of these in numbers only (smiles_rmlm_k8_p79 from smiles_repeated_mlm) runs the same code
    at other sizes and is left out: the objectives' unit tests cover the values."""
    paths, combinations, cases = set(), set(), []
    for run in runs:
        combination = json.dumps(settings_but_numbers(RAW_PARAMS["runs"][run]), sort_keys=True)
        if combination not in combinations:
            cases.append(pytest.param(run, marks=() if code_path(run) not in paths else pytest.mark.slow))
        paths.add(code_path(run))
        combinations.add(combination)
    return cases


pytestmark = pytest.mark.usefixtures("tracking_store")


def logged(out_dir, column: str) -> list[float]:
    with open(out_dir / "log.csv") as fh:
        return [float(row[column]) for row in csv.DictReader(fh)]


@pytest.mark.parametrize("run", first_of_each_code_path(RUNS))
def test_every_run_pretrains_and_fine_tunes(run, corpus, probe_task, tmp_path, capsys):
    out = tmp_path / "pretrain"
    metrics = run_pretrain(smoke_config(), run, corpus, out)
    assert metrics["steps"] == 3 and np.isfinite(metrics["valid_loss"]) and np.isfinite(metrics["train_loss"])
    assert logged(out, "step") == [1, 2, 3] and not (out / "checkpoint").exists()
    progress = capsys.readouterr().err
    assert "loss=" in progress and "tok_s=" in progress  # the bar shows the loss and tokens/s

    saved = load_file(out / "model/model.safetensors")
    objective = json.loads((out / "model/config.json").read_text())["pretraining"]["objective"]
    assert objective == RAW_PARAMS["runs"][run]["objective"]
    assert not [k for k in saved if "decoder" in k]      # MAE-LM's decoder stays out of the encoder
    assert not [k for k in saved if "transition" in k]   # so do ExLM's transition projections
    heads = load_file(out / "objective.safetensors")     # they are saved beside it, for the analyses
    assert all(not k.startswith("encoder.") for k in heads)
    # ExLM w/o transitions (the uniform DAG, or the per-mask CTC) has no transition weights
    learned_transitions = RAW_PARAMS["runs"][run].get("knobs", {}).get("transitions", "dense") in ("dense", "sparse")
    assert bool(heads) == (objective == "mae_lm" or (objective == "exlm" and learned_transitions))

    result = finetune(smoke_config(), run, "probe", 1, out / "model", probe_task / "task", probe_task / "card.json",
                      probe_task / "download.json", *finetune_outputs(tmp_path / "finetune"))
    assert 0.0 <= result["test"] <= 1.0
    # no GPU: its peak memory not measured, said as null rather than 0
    assert metrics["peak_gpu_memory_gib"] is None and result["peak_gpu_memory_gib"] is None
    for record in (metrics["arithmetic"], result["arithmetic"]):  # what computed them, in their metrics.json
        assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert record["torch"] == torch.__version__
        assert record["threads"] == 1 and "gpu" not in record


def test_validation_loss_is_logged_every_eval_every_steps_and_compared_with_the_unigram_baseline(corpus, tmp_path):
    out = tmp_path / "pretrain"
    metrics = run_pretrain(smoke_config(steps=5, eval_every=2, eval_blocks=3), "mlm", corpus, out)
    assert logged(out, "step") == [1, 2, 3, 4, 5]
    with open(out / "valid.csv") as fh:  # only the steps that evaluated: no empty cell for a plot to draw as 0
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["step", "valid_loss"] and [r["step"] for r in rows] == ["2", "4", "5"]  # and the last
    assert float(rows[-1]["valid_loss"]) == pytest.approx(metrics["valid_loss"])  # the same blocks and masks
    unigram = json.loads((corpus / "tokens/meta.json").read_text())["unigram_loss"]
    assert metrics["unigram_loss"] == unigram
    assert metrics["unigram_gap"] == pytest.approx(unigram - metrics["valid_loss"])
    assert metrics["valid_loss_floor"] == 0.0  # MLM scores each masked token by its own prediction
    assert metrics["valid_loss_measures"].startswith("nats per masked token")
    assert json.loads((out / "metrics.json").read_text()) == metrics
    run_id = json.loads((out / "model/config.json").read_text())["pretraining"]["mlflow_run_id"]
    logged_valid = MlflowClient().get_metric_history(run_id, "valid_loss")
    assert sorted({m.step for m in logged_valid}) == [2, 4, 5]  # MLflow has the same series


@pytest.mark.parametrize("run", ["mlm", "mae_lm", "exlm"])
def test_pretraining_on_whole_documents_trains_and_validates_on_them(run, corpus, tmp_path, monkeypatch):
    """`blocks: documents` (the paper profile's): every training block is one document (or piece
    of one), no [SEP] inside (windows of this corpus hold one), and validation reads such blocks too."""
    steps, validated = [], []

    def recording(kind, stream, seq_len, specials):
        source = block_source(kind, stream, seq_len, specials)
        sample, first = source.sample, source.first
        source.sample = lambda *args: steps.append(sample(*args)) or steps[-1]
        source.first = lambda *args: validated.append(first(*args)) or validated[-1]
        return source

    monkeypatch.setattr(pretrain_module, "block_source", recording)
    metrics = run_pretrain(smoke_config(blocks="documents", eval_blocks=64), run, corpus, tmp_path / "pretrain")
    assert metrics["steps"] == 3 and np.isfinite(metrics["valid_loss"]) and len(steps) == 3
    sep = AutoTokenizer.from_pretrained(corpus / "tokenizer").sep_token_id
    for blocks in steps + [b for groups in validated for b in groups]:
        assert (blocks[:, -1] == sep).all() and not (blocks[:, 1:-1] == sep).any()


def test_the_rope_base_setting_builds_the_encoder_and_its_mae_lm_decoder(corpus, tmp_path):
    weights = {}
    for rope_base in (100.0, 10000.0):
        out = tmp_path / str(rope_base)
        run_pretrain(smoke_config(rope_base=rope_base), "mae_lm", corpus, out)
        assert json.loads((out / "model/config.json").read_text())["rope_base"] == rope_base
        weights[rope_base] = load_file(out / "model/model.safetensors")
    # the same seed and data under another base train another encoder
    first, second = weights.values()
    assert any(not torch.equal(first[name], second[name]) for name in first)


def head_distribution_at_zero_state(encoder) -> torch.Tensor:
    """What the LM head predicts from an all-zero final state: softmax of its output bias alone."""
    with torch.no_grad():
        return encoder.lm_logits(torch.zeros(1, encoder.config.n_embd)).softmax(-1)[0].double()


def test_the_unigram_output_bias_makes_the_head_predict_the_train_frequencies(tmp_path):
    """Train counts 2, 3, 1, 0 over 4 token ids: add-one smoothing gives 3/10, 4/10, 2/10, 1/10."""
    np.save(tmp_path / "train_counts.npy", np.array([2, 3, 1, 0]))
    encoder = Encoder(EncoderConfig(vocab_size=4, n_layer=1, n_embd=8, n_head=2))
    init_output_bias(encoder, "unigram", tmp_path)
    assert head_distribution_at_zero_state(encoder).tolist() == pytest.approx([0.3, 0.4, 0.2, 0.1])
    untouched = Encoder(EncoderConfig(vocab_size=4, n_layer=1, n_embd=8, n_head=2))
    init_output_bias(untouched, "zero", tmp_path)
    assert head_distribution_at_zero_state(untouched).tolist() == pytest.approx([0.25] * 4)
    with pytest.raises(ValueError, match="counts for 4 token ids, but the tokenizer has 5"):
        init_output_bias(Encoder(EncoderConfig(vocab_size=5, n_layer=1, n_embd=8, n_head=2)), "unigram", tmp_path)
    with pytest.raises(FileNotFoundError, match="re-run `maskbench tokenize`"):
        init_output_bias(encoder, "unigram", tmp_path / "elsewhere")


def test_every_objective_starts_at_the_corpus_unigram_distribution(corpus):
    """One run per objective, set up as pretraining does: the head they all predict through starts
    at the add-one smoothed frequencies of the tiny corpus's train stream, counted here from its
    documents (each followed by a [SEP]); under `output_bias_init: zero` at the uniform one."""
    tokenizer = AutoTokenizer.from_pretrained(corpus / "tokenizer")
    counts = np.zeros(len(tokenizer))
    for document in tiny_documents()["train"]:
        for token in tokenizer(document, add_special_tokens=False)["input_ids"] + [tokenizer.sep_token_id]:
            counts[token] += 1
    expected = (counts + 1) / (counts.sum() + len(counts))
    config = smoke_config()
    runs = {spec["objective"]: run for run, spec in sorted(config["runs"].items())}
    assert set(runs) >= {"mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar"}
    for objective, run in runs.items():
        state = setup(config, run, corpus / "tokens", corpus / "tokenizer")
        assert state.objective.name == objective
        assert head_distribution_at_zero_state(state.objective.encoder).numpy() == pytest.approx(expected, rel=1e-5)
    state = setup(smoke_config(output_bias_init="zero"), runs["mae_lm"], corpus / "tokens", corpus / "tokenizer")
    assert head_distribution_at_zero_state(state.objective.encoder).numpy() == pytest.approx(1 / len(counts))


def test_the_ctc_blank_starts_at_the_uniform_share_and_every_other_token_at_its_frequency(corpus):
    """ExLM's per-mask CTC predicts its blank, [UNK], which the corpus never holds: it starts at
    probability 1/V, the other tokens in the proportions of their frequencies; the DAG's ExLM
    leaves the frequency start alone."""
    config = smoke_config()
    state = setup(config, "smiles_exlm_no_transitions_ctc", corpus / "tokens", corpus / "tokenizer")
    start = head_distribution_at_zero_state(state.objective.encoder).numpy()
    unk = state.specials.unk
    assert start[unk] == pytest.approx(1 / len(start), rel=1e-5)
    dag = head_distribution_at_zero_state(setup(config, "smiles_exlm", corpus / "tokens", corpus / "tokenizer")
                                          .objective.encoder).numpy()
    rest = np.arange(len(start)) != unk
    assert start[rest] / start[rest].sum() == pytest.approx(dag[rest] / dag[rest].sum(), rel=1e-5)
    assert dag[unk] < 1e-3 < 1 / len(start)  # the add-one frequency of a token the corpus never holds


def test_gradient_accumulation_equals_one_batch_twice_as_large(corpus, tmp_path):
    """A step's blocks and masks are drawn for the whole global batch and sliced into
    micro-batches, so two micro-batches of 2 train on the batch of 4 that one micro-batch of 4
    does; without dropout the updates then agree."""
    accumulated = run_pretrain(smoke_config(batch_size=4, micro_batch_size=2, dropout=0.0), "mlm", corpus,
                               tmp_path / "a")
    whole = run_pretrain(smoke_config(batch_size=4, micro_batch_size=4, dropout=0.0), "mlm", corpus, tmp_path / "b")
    assert accumulated["train_loss"] == pytest.approx(whole["train_loss"], rel=1e-5)
    # before clipping, so a sum of micro-batch gradients instead of their mean would show here
    assert logged(tmp_path / "a", "grad_norm") == pytest.approx(logged(tmp_path / "b", "grad_norm"), rel=1e-4)
    a, b = load_file(tmp_path / "a/model/model.safetensors"), load_file(tmp_path / "b/model/model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    differs = run_pretrain(smoke_config(batch_size=2, micro_batch_size=2, dropout=0.0), "mlm", corpus, tmp_path / "c")
    assert differs["train_loss"] != pytest.approx(whole["train_loss"], rel=1e-5)  # the comparison can fail


def test_a_batch_that_micro_batches_do_not_divide_is_refused_naming_what_would(corpus, tmp_path):
    with pytest.raises(ParamsError, match=r"runs\.mlm: batch_size 6 is not micro_batch_size 4 x 1 process.*"
                                          r"expected micro_batch_size one of \[1, 2, 3, 6\]"):
        smoke_config(batch_size=6, micro_batch_size=4)


@pytest.mark.slow
def test_compiled_model_pretrains_and_saves_plain_keys(corpus, tmp_path):
    out = tmp_path / "compiled"
    metrics = run_pretrain(smoke_config(steps=2, compile=True), "exlm", corpus, out)
    assert metrics["steps"] == 2 and np.isfinite(metrics["valid_loss"])
    assert not [k for k in load_file(out / "model/model.safetensors") if "_orig_mod" in k]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("run", ["mlm", "mae_lm", "exlm"])
def test_bf16_pretraining_on_gpu(run, corpus, tmp_path):
    """On CUDA the loop runs under bf16 autocast: the loss stays finite, the weights float32."""
    out = tmp_path / "gpu"
    metrics = run_pretrain(smoke_config(device="cuda"), run, corpus, out)
    assert np.isfinite(metrics["train_loss"]) and np.isfinite(metrics["valid_loss"])
    assert {t.dtype for t in load_file(out / "model/model.safetensors").values()} == {torch.float32}
    assert metrics["peak_gpu_memory_gib"] > 0  # the peak the plan's memory estimate is held against


def test_compute_device_sets_the_threads_and_flushes_subnormals():
    threads = torch.get_num_threads()
    try:
        assert compute_device("cpu", 1) == torch.device("cpu") and torch.get_num_threads() == 1
        assert torch.tensor([1e-40]).mul(1.0).item() == 0.0  # a float32 subnormal, flushed
        assert torch.tensor([1e-30]).mul(1.0).item() == pytest.approx(1e-30)  # a normal float, kept
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)
