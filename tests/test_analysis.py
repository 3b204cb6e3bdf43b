"""The analyses (maskbench.analysis): each measure against a case whose answer is known, on the
masks objectives really draw; ExLM's case study on a tiny trained ExLM; the stage writing its
five files for an MLM and an ExLM run of a tiny workdir, and saying where a measure does not
apply."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from maskbench.align import dag_loss
from maskbench.analysis.alignment import alignment_record, alignment_totals
from maskbench.analysis.case_study import case_study
from maskbench.analysis.corruption import binomial_interval, corruption, fully_masked
from maskbench.analysis.entropy import entropy, entropy_bits
from maskbench.analysis.load import load_objective
from maskbench.analysis.rank import effective_rank, masked_input_states, same_rows
from maskbench.analysis.stage import analyse
from maskbench.config import read_params, run_settings
from maskbench.data.corpus import load_stream
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import CausalLM, Inspection, MaskedLM, RepeatedMLM, SpecialTokens
from maskbench.cli import cmd_finetune
from maskbench.io import DamagedFile
from maskbench.stages import STAGES, analysis_finetune_job, job
from maskbench.train.pretrain import PretrainFiles, pretrain
from maskbench.train.tracking import tracking_uri
from maskbench.train.validation import validation_set
from tests.helpers import pretrain_workdir, task_files

pytestmark = pytest.mark.usefixtures("tracking_store")
SPECIALS = SpecialTokens(pad=0, cls=2, sep=3, mask=4)


def tiny_encoder(max_position: int = 64) -> Encoder:
    return Encoder(EncoderConfig(vocab_size=50, n_layer=1, n_embd=16, n_head=2, n_inner=32, max_position=max_position,
                                 position_scheme="rope"))


def blocks(n: int, length: int, seed: int = 0) -> torch.Tensor:
    b = torch.randint(5, 50, (n, length), generator=torch.Generator().manual_seed(seed))
    b[:, 0], b[:, -1] = SPECIALS.cls, SPECIALS.sep
    return b


def centred_orthonormal(rows: int, rank: int, width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(U, V): `rank` centred orthonormal columns of height `rows`, orthonormal rows of width `width`."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(rows, rank))
    u, _ = np.linalg.qr(u - u.mean(axis=0))
    v, _ = np.linalg.qr(rng.normal(size=(width, rank)))
    return u, v.T


@pytest.mark.parametrize("rank", [1, 3, 10])
def test_effective_rank_of_matrices_of_known_rank(rank):
    u, v = centred_orthonormal(200, rank, 32)
    equal = u @ v + 5.0  # equal singular values, plus an offset centring removes
    assert effective_rank(equal, threshold=1.0) == rank
    assert effective_rank(equal, threshold=0.9) == math.ceil(0.9 * rank)
    # unequal singular values: the count numpy.linalg.svd's values give
    s = np.geomspace(10.0, 0.1, rank)
    x = (u * s) @ v
    energy = np.linalg.svd(x - x.mean(axis=0), compute_uv=False) ** 2
    expected = int(np.argmax(np.cumsum(energy) / energy.sum() >= 0.9) + 1)
    assert effective_rank(x, 0.9) == expected <= rank
    assert effective_rank(np.ones((10, 4))) == 0


def test_effective_rank_by_hand():
    """Three centred, mutually orthogonal columns of norms 6, 4 and 2 (plus an offset centring
    removes): singular values 6, 4, 2, energies 36, 16, 4 of 56, cumulative 0.643, 0.929, 1."""
    a, b, c = np.array([1, -1, 1, -1]), np.array([1, 1, -1, -1]), np.array([1, -1, -1, 1])
    x = np.stack([3 * a, 2 * b, c], axis=1) + 7.0
    assert [effective_rank(x, t) for t in (0.6, 0.643, 0.9, 0.928, 0.93, 1.0)] == [1, 2, 2, 2, 3, 3]


def test_the_papers_matrix_holds_real_and_mask_states_and_the_variant_real_ones_only():
    """MAE-LM §2's H^l: every body state of the masked input; the project's variant: its real
    tokens only. Both compared with states computed here by hand: the encoder run on the input
    masked at hand-picked positions, each state below the last layer centred and scaled to unit
    variance over its own features (a LayerNorm without parameters), the last as the encoder
    returns it (after its final LayerNorm)."""
    objective = MaskedLM(tiny_encoder(), SPECIALS, mask_ratio=0.25).eval()
    tokens = blocks(2, 10)  # body: positions 1..8
    masked_at = torch.tensor([[1, 4], [2, 8]])
    states = masked_input_states(objective, tokens, {"masked_at": masked_at})
    inputs = tokens.clone()
    inputs[0, [1, 4]] = inputs[1, [2, 8]] = SPECIALS.mask
    with torch.no_grad():
        hidden = objective.encoder(inputs, output_hidden_states=True).hidden_states
    is_mask = [(0, 0), (0, 3), (1, 1), (1, 7)]  # (row, body index) of the four [MASK]s
    for layer, h in enumerate(hidden):
        if layer < len(hidden) - 1:
            h = (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + 1e-5)
        body = h[:, 1:9]
        real = [body[r, j] for r in range(2) for j in range(8) if (r, j) not in is_mask]
        torch.testing.assert_close(states["with_mask"][layer], body.reshape(16, -1))
        torch.testing.assert_close(states["mask"][layer], torch.stack([body[r, j] for r, j in is_mask]))
        torch.testing.assert_close(states["real_with_mask"][layer], torch.stack(real))
    # the [MASK] rows change the paper's rank: the variant's matrix is a strict subset of its rows
    assert len(states["with_mask"][0]) == 16 and len(states["real_with_mask"][0]) == 12


def test_same_rows_keeps_the_same_rows_of_equal_matrices():
    """MAE-LM's `with_mask` and `real_with_mask` are one matrix: cut to the same rows, their ranks agree."""
    x = [torch.randn(30, 4, generator=torch.Generator().manual_seed(1))]
    kept, n = same_rows({"with_mask": x, "real_with_mask": x, "mask": [torch.zeros(0, 4)], "small": [x[0][:7]]}, 100, 0)
    assert n == 7 and set(kept) == {"with_mask", "real_with_mask", "small"}  # no [MASK] rows: left out
    assert torch.equal(kept["with_mask"][0], kept["real_with_mask"][0])


def test_entropy_of_uniform_and_one_hot_predictions():
    assert entropy_bits(torch.zeros(3, 64)).tolist() == pytest.approx([6.0] * 3)
    one_hot = torch.full((2, 64), -1e4)
    one_hot[:, 7] = 0.0
    assert entropy_bits(one_hot).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert entropy_bits(torch.tensor([[0.0, 0.0, -1e4, -1e4]])).item() == pytest.approx(1.0)


def test_entropy_record_scores_fully_masked_tokens_against_a_hand_computation():
    """Repeated MLM, k = 2, vocabulary 50: every prediction at a copy of an odd position is sure
    of the right token, every other one is uniform. A fully masked token's nll is the mean over
    its two copies (ln 50 at even positions, 0 at odd ones) and a token with a visible copy is
    left out, whatever its predictions."""
    objective = RepeatedMLM(tiny_encoder(64), SPECIALS, k=2, mask_ratio=0.5).eval()
    data = blocks(3, 16, seed=1)
    draws = objective.draw(data, torch.Generator().manual_seed(0))
    repeated = data.repeat_interleave(2, dim=1)

    def inspect(tokens, draws, hidden_states=False):
        masked_at = draws["masked_at"]
        labels = repeated.gather(1, masked_at).flatten()
        logits = torch.zeros(labels.numel(), 50)
        sure = ((masked_at // 2) % 2 == 1).flatten()
        logits[sure] = -1e4
        logits[sure, labels[sure]] = 0.0
        return Inspection(logits=logits, labels=labels)

    objective.inspect = inspect
    record = entropy(objective, [(data, draws)])
    lost = fully_masked(draws["masked_at"], 2, 16)
    odd = lost[:, 1::2].sum().item()
    even = lost.sum().item() - odd
    assert record["tokens"] == odd + even and odd > 0 and even > 0
    assert record["nll"] == pytest.approx(even * math.log(50) / (odd + even))
    assert record["bits"] == pytest.approx(even * math.log2(50) / (odd + even))
    assert record["std_nll"] > 0


def test_fully_masked_counts_a_token_only_when_all_its_copies_are_masked():
    # k = 2, tokens 0..3 at inputs (0, 1), (2, 3), ...: token 1 has both copies masked, token 2 one
    lost = fully_masked(torch.tensor([[2, 3, 5]]), 2, 4)
    assert lost.tolist() == [[False, True, False, False]]


@pytest.mark.parametrize("k, p", [(1, 0.15), (2, 0.15), (2, 0.387), (4, 0.622), (8, 0.789)])
def test_measured_corruption_is_within_the_binomial_interval_of_p_to_the_k(k, p):
    """A 95 % interval misses 1 draw in 20 by design: of 5 seeded draws, at most one may fall outside."""
    objective = RepeatedMLM(tiny_encoder(128 * k), SPECIALS, k=k, mask_ratio=p)
    data = blocks(100, 128)  # pretraining's block length: the rounding of the mask count is small
    records = [corruption(objective, data, objective.draw(data, torch.Generator().manual_seed(seed)))
               for seed in range(5)]
    for record in records:
        assert record["applies"] and record["k"] == k and record["tokens"] == 100 * 126
        assert record["drawn_p"] == pytest.approx(p, abs=0.5 / (126 * k))
        assert record["expected"] == pytest.approx(p ** k)
        assert record["interval"][0] < p ** k < record["interval"][1]
        # the interval is a real test: twice the share would fall outside it
        assert not record["interval"][0] <= 2 * record["share"] <= record["interval"][1]
    assert sum(r["within"] for r in records) >= 4, records


def test_binomial_interval_narrows_with_more_tokens():
    wide, narrow = binomial_interval(100, 0.2), binomial_interval(10_000, 0.2)
    assert wide[0] < narrow[0] < 0.2 < narrow[1] < wide[1]


def test_measures_that_do_not_apply_say_why():
    objective = CausalLM(tiny_encoder(), SPECIALS).eval()
    data = blocks(4, 16)
    for record in (corruption(objective, data, {}), entropy(objective, [(data, {})]),
                   case_study(objective, None, "unused", "analysis.case_study.text")):
        assert record["applies"] is False and "ar" in record["why"]


# --- on tiny trained runs -------------------------------------------------------------------

TASK_ROWS = [{"text": t, "text_pair": None, "label": i % 2}
             for i, t in enumerate(["the cat sat on the mat", "a dog ran in the park", "the bird sang",
                                    "the cat ran"] * 4)]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, tiny_tokenizer):
    """A smoke workdir whose MLM and ExLM runs are pretrained a few steps and analysed, the
    rank after fine-tuning on a tiny task included (of the encoder their fine-tuning job on it
    keeps): {run: records}, and the workdir."""
    root = pretrain_workdir(tmp_path_factory.mktemp("analysis") / "w", tiny_tokenizer, steps=6, checkpoint_every=100,
                            log_every=2, eval_every=3, batch_size=4, micro_batch_size=4, eval_blocks=4, device="cpu")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["analysis"].update(blocks=8, rows=200, finetune_task={"text": "rotten_tomatoes"},
                              case_study={"text": "the cat [MASK] on the [MASK] .", "smiles": "C[MASK]"})
    params["profiles"]["smoke"]["finetune"]["settings"].update(epochs=1, batch_size=4, device="cpu")
    params["profiles"]["smoke"]["tables"]["table6"]["runs"] = ["mlm", "exlm"]  # the runs measured fine-tuned
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    task = root / "data/tasks/rotten_tomatoes"
    task_files(root / "data/tasks/tmp", {"train": TASK_ROWS, "dev": TASK_ROWS[:4], "test": TASK_ROWS[4:8]},
               "classification", ["no", "yes"])
    (root / "data/tasks/tmp/task").rename(task)
    (root / "data/tasks/tmp/card.json").rename(root / "data/cards/task-rotten_tomatoes.json")
    (root / "data/tasks/tmp/download.json").rename(root / "data/cards/download-rotten_tomatoes.json")
    _, config = read_params(root / "params.yaml")
    records = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for run in ("mlm", "exlm", "mae_lm", "repeated_mlm"):
            pretrained = job(config, "pretrain", {"run": run})
            files = PretrainFiles.of_stage(pretrained.output, root / f"runs/pretrain/{run}/checkpoint", root)
            pretrain(config, run, root / pretrained.input["tokens"], root / pretrained.input["tokenizer"],
                     [root / p for p in pretrained.input["cards"]], files)
            if kept := analysis_finetune_job(config, run):
                cmd_finetune(config, job(config, "finetune", kept))
            analysis = job(config, "analyse", {"run": run})
            records[run] = analyse(config, run, analysis.input, analysis.output)
    return root, config, records


def test_the_analysis_fine_tunes_nothing_and_measures_the_encoder_its_fine_tuning_job_kept(analysed, tmp_path):
    """The rank after fine-tuning is of the encoder `maskbench finetune` kept for the analysis
    (its input file): the analysis fine-tunes nothing (fine-tuning raises here), the only
    fine-tuning runs in MLflow are the stage's, and handed the pretrained encoder in its place, it
    measures that: the same ranks as the pretrained states without [MASK]."""
    import mlflow

    import maskbench.finetune.loop

    root, config, records = analysed
    mlflow.set_tracking_uri(tracking_uri(root))
    runs = mlflow.search_runs(experiment_names=["maskbench"], output_format="list")
    names = {r.info.run_name: r.data.tags["stage"] for r in runs if r.data.tags.get("stage") != "pretrain"}
    assert names == {f"finetune/{run}/rotten_tomatoes/seed1": "finetune" for run in ("mlm", "exlm")}
    analysis = job(config, "analyse", {"run": "mlm"})
    assert analysis.input["encoder"] == "runs/finetune/mlm/rotten_tomatoes/seed1/encoder"
    outputs = {name: str(tmp_path / name) for name in analysis.output}

    def no_fine_tuning(*args, **kwargs):
        raise AssertionError("the analysis fine-tuned")

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setattr(maskbench.finetune.loop, "finetune", no_fine_tuning)
        again = analyse(config, "mlm", analysis.input, outputs)["rank"]
        assert again["finetuned"] == records["mlm"]["rank"]["finetuned"]
        pretrained = analyse(config, "mlm", analysis.input | {"encoder": analysis.input["model"]}, outputs)["rank"]
    assert [layer["real_without_mask"] for layer in pretrained["finetuned"]["layers"]] == [
        layer["real_without_mask"] for layer in pretrained["layers"]]


def test_the_kept_encoder_is_the_one_the_analysis_fine_tuned_itself_before(analysed, tmp_path):
    """Reading the fine-tuning job's encoder changes no analysis number: the analysis used to
    fine-tune the run itself, through the same entry point with the same seed and settings, and
    that encoder is the kept one to the last bit (on the CPU, where both ran)."""
    from maskbench.finetune.loop import finetune
    from safetensors.torch import load_file

    root, config, _ = analysed
    kept = analysis_finetune_job(config, "mlm")
    fine = job(config, "finetune", kept)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        finetune(config, "mlm", kept["task"], kept["seed"], *(Path(fine.input[k]) for k in
                                                             ("model", "task", "card", "data_card")),
                 tmp_path / "metrics.json", tmp_path / "predictions.jsonl", encoder_dir=tmp_path / "encoder")
    again, saved = (load_file(d / "model.safetensors") for d in (tmp_path / "encoder", root / fine.output["encoder"]))
    assert again.keys() == saved.keys() and all(torch.equal(again[k], saved[k]) for k in saved)


def test_a_missing_or_damaged_kept_encoder_is_named_with_the_job_that_rebuilds_it(analysed, tmp_path):
    import shutil

    root, config, _ = analysed
    analysis = job(config, "analyse", {"run": "mlm"})
    broken = tmp_path / "encoder"
    shutil.copytree(root / analysis.input["encoder"], broken)
    outputs = {name: str(tmp_path / name) for name in analysis.output}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        weights = broken / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        with pytest.raises(DamagedFile, match=f"{broken}: cannot be read"):
            analyse(config, "mlm", analysis.input | {"encoder": str(broken)}, outputs)
        missing = "runs/finetune/mlm/rotten_tomatoes/seed9/encoder"
        with pytest.raises(DamagedFile, match=f"{missing}: no fine-tuned encoder there.*"
                                              "maskbench finetune --run mlm --task rotten_tomatoes --seed 9"):
            analyse(config, "mlm", analysis.input | {"encoder": missing}, outputs)


def test_the_stage_writes_all_five_files_for_mlm_and_exlm(analysed):
    root, config, _ = analysed
    for run in ("mlm", "exlm"):
        for name, pattern in STAGES["analyse"].outputs.items():
            written = json.loads((root / pattern.format(run=run)).read_text())
            assert written["run"] == run and written["blocks"] == 8, name
            assert "cpu_capability" in written["arithmetic"], name  # the table's footer reads it
    for measure in ("case_study", "alignment"):
        mlm = json.loads((root / STAGES["analyse"].outputs[measure].format(run="mlm")).read_text())
        assert mlm["applies"] is False and "ExLM" in mlm["why"]


def test_the_records_follow_the_contract(analysed):
    _, _, records = analysed
    for run in ("mlm", "exlm"):
        c, e, r = records[run]["corruption"], records[run]["entropy"], records[run]["rank"]
        assert c["k"] == 1 and c["p"] == 0.15 and c["within"] and c["expected"] == pytest.approx(0.15)
        assert e["tokens"] > 0 and 0.0 < e["bits"] <= math.log2(120) + 1e-6 and e["std_bits"] >= 0.0
        assert e["nll"] > 0.0 and e["std_nll"] >= 0.0  # a 6-step model is far from sure of any token
        assert r["threshold"] == 0.9 and 0 < r["rows"] <= 200 and r["layer_normalised"]
        assert [layer["layer"] for layer in r["layers"]] == list(range(len(r["layers"])))  # embeddings + blocks
        for layer in r["layers"]:
            assert all(1 <= layer[kind] <= 64 for kind in ("with_mask", "real_with_mask", "real_without_mask"))
        # with RoPE the embeddings' output of every [MASK] is the same vector: no spread
        assert r["layers"][0]["mask"] == 0 and all(1 <= layer["mask"] <= 64 for layer in r["layers"][1:])
        assert r["finetuned"]["task"] == "rotten_tomatoes" and r["finetuned"]["seed"] == 1
        assert len(r["finetuned"]["layers"]) == len(r["layers"])


def test_mae_lm_encoder_sees_no_mask_and_repeated_mlm_counts_its_copies(analysed):
    _, _, records = analysed
    mae = records["mae_lm"]["rank"]
    assert all(layer["mask"] is None and layer["real_with_mask"] >= 1 for layer in mae["layers"])
    # its encoder sees no [MASK]: the paper's matrix is the real-token one, on the same rows
    assert all(layer["with_mask"] == layer["real_with_mask"] for layer in mae["layers"])
    repeated = records["repeated_mlm"]
    assert repeated["corruption"]["k"] == 2 and repeated["corruption"]["expected"] == pytest.approx(0.15 ** 2)
    # only tokens with both copies masked are scored: about p**k of them
    assert 0 < repeated["entropy"]["tokens"] == repeated["corruption"]["fully_masked"]
    # neither is in a rank table: their analyses do not pay for a fine-tuning
    assert mae["finetuned"] is None and repeated["rank"]["finetuned"] is None


def test_case_study_of_a_tiny_trained_exlm(analysed):
    _, config, records = analysed
    record = records["exlm"]["case_study"]
    k = config["runs"]["exlm"]["knobs"]["k"]
    L = k * (2 + 2)  # two [MASK], and the [CLS] and [SEP] expanded
    assert record["applies"] and record["tokens"][0] == "[CLS]" and record["tokens"].count("[MASK]") == 2
    assert len(record["states"]) == L and all(len(s["top3"]) == 3 for s in record["states"])
    for state in record["states"]:
        probs = [p for _, p in state["top3"]]
        assert probs == sorted(probs, reverse=True) and 0.0 < sum(probs) <= 1.0 + 1e-6
    masked = [i for i, t in enumerate(record["tokens"]) if t == "[MASK]"]
    assert [s["masked_index"] for s in record["states"]] == [i for i in [0, *masked, len(record["tokens"]) - 1]
                                                              for _ in range(k)]
    transitions = np.array(record["transitions"])
    assert transitions.shape == (L, L) and np.allclose(np.tril(transitions), 0.0)  # forward edges only
    # every state with a later state it may reach spreads a probability of 1 over them; the sparse
    # DAG has no edge between two states of one token, so there the last token's states are leaves
    source = np.array([s["masked_index"] for s in record["states"]])
    edges = np.triu(np.ones((L, L), dtype=bool), 1)
    if config["runs"]["exlm"]["knobs"]["transitions"] == "sparse":
        edges &= source[:, None] != source[None, :]
    assert np.allclose(transitions[~edges], 0.0)
    assert np.allclose(transitions.sum(axis=1), np.where(edges.any(axis=1), 1.0, 0.0))
    path = record["best_path"]
    assert len(path) == 2 and 0 < path[0] < path[1] < L - 1
    assert record["decoded"] == [record["states"][u]["top3"][0][0] for u in path]


def test_objective_weights_are_saved_and_reloaded(analysed):
    root, config, _ = analysed
    objective, _ = load_objective(config["runs"]["exlm"], root / "runs/pretrain/exlm/model",
                                  root / "runs/pretrain/exlm/objective.safetensors")
    assert objective.transition_query.weight.abs().sum() > 0
    with pytest.raises(ValueError, match="does not match objective"):
        load_objective(config["runs"]["exlm"], root / "runs/pretrain/exlm/model",
                       root / "runs/pretrain/mlm/objective.safetensors")


# --- ExLM's alignment -----------------------------------------------------------------------

def uniform_transitions(L: int) -> torch.Tensor:
    """log E (1, L, L): from each state, every later state equally likely."""
    forward = torch.ones(L, L, dtype=torch.bool).triu(1)
    counts = forward.sum(-1, keepdim=True).clamp(min=1)
    return torch.where(forward, -counts.float().log(), float("-inf"))[None]


def expanded_token(m: int, k: int) -> torch.Tensor:
    """(L,): which expanded token each state belongs to: 0 for [CLS], i for masked token i, m + 1 for [SEP]."""
    return torch.arange(k * (m + 2)) // k


def own_states(m: int, k: int) -> torch.Tensor:
    """(m, L) boolean: masked token i's own states, k(i + 1) .. k(i + 2) - 1 (the [CLS]'s k come first)."""
    return expanded_token(m, k)[None, :] == torch.arange(1, m + 1)[:, None]


def alignment_measures(log_emit: torch.Tensor, log_trans: torch.Tensor, k: int) -> dict:
    """The record's numbers for emissions `log_emit` (B, m, L) and transitions `log_trans`
    (B, L, L) of blocks whose only [CLS]/[SEP] are their ends, laid out as ExLM expands them."""
    B, m, L = log_emit.shape
    if L != k * (m + 2):
        raise ValueError(f"{L} states for {m} masked tokens and k={k}; ExLM lays out k(m + 2) = {k * (m + 2)}")
    state_group = expanded_token(m, k).to(log_emit.device).expand(B, L)
    target_is_masked = torch.ones(B, m, dtype=torch.bool, device=log_emit.device)
    return alignment_record(alignment_totals(log_emit, log_trans, state_group, target_is_masked), k, B)


def test_own_states_follow_the_cls_states():
    assert own_states(m=2, k=2).int().tolist() == [[0, 0, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0]]


def test_one_masked_token_and_uniform_dag_match_a_hand_computation():
    """m = 1, k = 2: L = 6 states, interior 1..4 (own: 2, 3). A path is start -> u -> end, with
    probability E[0, u] E[u, 5] P_u = 1/5 * 1/(5 - u) * P_u; with equal emissions the posterior
    of u is proportional to 1/(5 - u)."""
    L, k = 6, 2
    weights = {u: 1 / (5 - u) for u in (1, 2, 3, 4)}
    expected = (weights[2] + weights[3]) / sum(weights.values())
    record = alignment_measures(torch.full((1, 1, L), math.log(0.1)), uniform_transitions(L), k)
    assert record["own_posterior"] == pytest.approx(expected)          # 7/25
    assert record["even_share"] == 1.0
    # next-token mass: [CLS] states 0, 1 -> own states 2, 3; own states 2, 3 -> [SEP] states 4, 5
    nexts = [2 / 5, 2 / 4, 2 / 3, 2 / 2]
    assert record["next_transition"] == pytest.approx(sum(nexts) / 4)
    assert record["own_log_prob"] == pytest.approx(math.log(0.1)) and record["other_log_prob"] is None
    # with every emission 1 the paths' probability is the transitions' alone: sum_u E[0, u] E[u, 5]
    assert record["transition_floor"] == pytest.approx(-math.log(sum(weights.values()) / 5))   # -log 5/12


def test_a_state_that_emits_one_distribution_scores_its_loss_plus_the_transition_floor():
    """Where every state emits the same distribution q (a unigram predictor), every path emits
    the m targets with prob. q(y_1)...q(y_m): log Z = sum_i log q(y_i) + log Z_floor, so the DAG's
    loss is the emitter's own plus the floor, the reference a DAG without learned transitions is
    read against."""
    m, k = 3, 2
    L = k * (m + 2)
    log_q = torch.tensor([math.log(0.5), math.log(0.2), math.log(0.3)])
    log_emit = log_q[None, :, None].expand(1, m, L).contiguous()
    record = alignment_measures(log_emit, uniform_transitions(L), k)
    log_z = dag_loss(log_emit, uniform_transitions(L))
    assert -log_z.item() / m == pytest.approx(-log_q.mean().item() + record["transition_floor"], rel=1e-6)
    assert record["transition_floor"] > 0.0


def test_emissions_that_tell_positions_apart_put_the_posterior_on_the_own_states():
    m, k = 4, 2
    L = k * (m + 2)
    own = own_states(m, k)
    log_emit = torch.where(own, 0.0, -30.0)[None].expand(3, m, L).contiguous()
    record = alignment_measures(log_emit, uniform_transitions(L).expand(3, L, L), k)
    assert record["own_posterior"] == pytest.approx(1.0, abs=1e-6) and record["masked_tokens"] == 12
    assert record["own_log_prob"] == 0.0 and record["other_log_prob"] == -30.0


def test_a_sep_between_documents_is_a_target_but_not_a_masked_token():
    """Groups [CLS] | mask | inner [SEP] | last [SEP], k = 2: the [SEP] is the DAG's second
    target; the token measures count the one masked token only, whose posterior sits on its own
    states when the emissions tell them apart; no other masked token, so no other_log_prob."""
    state_group = torch.tensor([[0, 0, 1, 1, 2, 2, 3, 3]])
    own = torch.stack([state_group[0] == 1, state_group[0] == 2])[None]
    log_emit = torch.where(own, 0.0, -30.0)
    totals = alignment_totals(log_emit, uniform_transitions(8), state_group, torch.tensor([[True, False]]))
    record = alignment_record(totals, k=2, blocks=1)
    assert record["masked_tokens"] == 1 and record["even_share"] == 1.0
    assert record["own_posterior"] == pytest.approx(1.0, abs=1e-6)
    assert record["own_log_prob"] == 0.0 and record["other_log_prob"] is None


def test_alignment_rejects_a_layout_that_is_not_exlms():
    with pytest.raises(ValueError, match="k\\(m \\+ 2\\)"):
        alignment_measures(torch.zeros(1, 2, 7), uniform_transitions(7), k=2)


def test_alignment_of_a_tiny_trained_exlm(analysed):
    _, config, records = analysed
    record = records["exlm"]["alignment"]
    assert record["applies"] and record["k"] == config["runs"]["exlm"]["knobs"]["k"]
    assert 0.0 < record["own_posterior"] <= 1.0 + 1e-6 and 0.0 < record["next_transition"] <= 1.0 + 1e-6
    assert record["own_log_prob"] < 0.0 and record["other_log_prob"] < 0.0
    assert 0.0 <= record["transition_floor"] <= record["dag_nll"]  # the emissions' cost comes on top


def test_dag_nll_is_the_validation_scorer_on_the_analysis_masks(analysed):
    """The alignment record's dag_nll, gathered over the stage's batches, is what ExLM's
    validation scorer (`masked_nll`) gives on all the analysis blocks at once, with the masks
    the stage drew: nats per masked token, every batch's tokens counted once."""
    root, config, records = analysed
    spec, analysis = config["runs"]["exlm"], config["analysis"]
    objective, _ = load_objective(spec, root / "runs/pretrain/exlm/model",
                                  root / "runs/pretrain/exlm/objective.safetensors")
    objective.eval()
    stream = load_stream(root / "data/tokens/text", "valid")
    valid = validation_set(stream, run_settings(config, "exlm")["seq_len"], objective.specials, analysis["blocks"])
    draws = objective.draw(valid.blocks, torch.Generator().manual_seed(analysis["seed"]))
    assert len(valid.blocks) > run_settings(config, "exlm")["micro_batch_size"]  # the stage scored more than one batch
    with torch.no_grad():
        nll, count = objective.masked_nll(valid.blocks, draws["masked_at"])
    assert records["exlm"]["alignment"]["masked_tokens"] == count
    assert records["exlm"]["alignment"]["dag_nll"] == pytest.approx(nll.item() / count, rel=1e-4)
