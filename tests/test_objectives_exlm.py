"""ExLM (Zheng et al. 2025, §4, App. H): expansion, 2-D positions, the DAG's transitions, and a
loss that equals brute-force enumeration of the alignment paths (so the objective hands
`maskbench.align.dag_loss` the emissions and transitions it means to)."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from maskbench.finetune.view import EncoderView
from maskbench.objectives.registry import ObjectiveOutput, finetune_inputs
from maskbench.objectives import exlm as exlm_module
from maskbench.objectives.exlm import ExLMInspection, one_token_ctc_nll
from maskbench.objectives.masking import mask_count
from tests.helpers import (REPO, SPECIALS, VOCAB, WITH_UNK, Spy, blocks, brute_force_log_z, make, objective_inspection,
                           objective_step, seeded_draws)

SEQ = 10
RATIO = 0.25
M = mask_count(SEQ - 2, RATIO)   # 2 masked tokens per block


def exlm(k=2, **knobs):
    return make("exlm", {"k": k, "mask_ratio": RATIO, **knobs}, seq_len=SEQ, specials=WITH_UNK)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_expanded_length_is_n_minus_m_plus_km_plus_expanded_ends(k):
    model = exlm(k)
    model.encoder = Spy(model.encoder)
    seen = objective_inspection(model, blocks(3, SEQ), 0)
    (ids, kwargs), = model.encoder.calls
    assert ids.shape == (3, SEQ - M + k * M + 2 * (k - 1))
    assert ((ids == SPECIALS.mask).sum(1) == k * M).all()
    assert ((ids == SPECIALS.cls).sum(1) == k).all() and ((ids == SPECIALS.sep).sum(1) == k).all()
    clone = kwargs["clone_index"]
    assert sorted(clone[0][clone[0] > 0].tolist()) == sorted(list(range(1, k + 1)) * (M + 2))
    # every state of a [MASK] at position i sits at 2-D position (i, c)
    positions = kwargs["positions"]
    assert (positions[ids == SPECIALS.cls] == 0).all() and (positions[ids == SPECIALS.sep] == SEQ - 1).all()
    assert seen.log_transitions.shape == (3, k * (M + 2), k * (M + 2))


def test_transitions_are_forward_distributions():
    log_e = objective_inspection(exlm(2), blocks(2, SEQ), 0).log_transitions
    L = log_e.shape[-1]
    below = torch.ones(L, L, dtype=torch.bool).tril()
    assert torch.isneginf(log_e[:, below]).all()
    torch.testing.assert_close(log_e[:, :-1].logsumexp(-1), torch.zeros(2, L - 1))


def test_sparse_dag_has_no_edges_between_states_of_one_token():
    model = exlm(3, transitions="sparse")
    model.encoder = Spy(model.encoder)
    seen = objective_inspection(model, blocks(2, SEQ), 0)
    (ids, kwargs), = model.encoder.calls
    state_token = kwargs["positions"][kwargs["clone_index"] > 0].view(2, -1)
    same = state_token[:, :, None] == state_token[:, None, :]
    assert torch.isneginf(seen.log_transitions[same]).all()
    assert torch.isfinite(seen.log_transitions[~same & torch.ones_like(same).triu(1)]).all()


def test_no_transitions_means_uniform_over_successors():
    model = exlm(2, transitions="none")
    assert not any("transition" in name for name, _ in model.named_parameters())
    log_e = objective_inspection(model, blocks(1, SEQ), 0).log_transitions[0]
    L = log_e.shape[0]
    for v in range(L - 1):
        torch.testing.assert_close(log_e[v, v + 1:], torch.full((L - v - 1,), -torch.log(torch.tensor(L - v - 1.0))))


def test_every_cls_and_sep_of_a_block_is_expanded_and_a_target():
    """Row 0 holds a [SEP] and a [CLS] between documents, row 1 only its ends; k = 2, one mask each.
    Every [CLS]/[SEP] becomes k states (as the official code and fine-tuning expand them), the
    inner ones are DAG targets in order beside the masked token, and row 1 ends with padding
    slots that change nothing: the batch's loss is the mean of each row's loss alone."""
    cls, sep, mask = SPECIALS.cls, SPECIALS.sep, SPECIALS.mask
    tokens = torch.tensor([[cls, 5, sep, 6, 7, cls, 8, sep],
                           [cls, 9, 10, 11, 12, 13, 14, sep]])
    draws = {"masked_at": torch.tensor([[3], [4]])}
    model = make("exlm", {"k": 2, "mask_ratio": RATIO}, seq_len=8).eval()
    model.encoder = Spy(model.encoder)
    seen = model.inspect(tokens, draws)
    (ids, kwargs), = model.encoder.calls
    assert ids.tolist() == [[cls, cls, 5, sep, sep, mask, mask, 7, cls, cls, 8, sep, sep],
                            [cls, cls, 9, 10, 11, mask, mask, 13, 14, sep, sep, sep, sep]]
    assert kwargs["positions"].tolist() == [[0, 0, 1, 2, 2, 3, 3, 4, 5, 5, 6, 7, 7],
                                            [0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 7, 7, 7]]
    assert kwargs["clone_index"].tolist() == [[1, 2, 0, 1, 2, 1, 2, 0, 1, 2, 0, 1, 2],
                                              [1, 2, 0, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0]]
    assert kwargs["attention_mask"].tolist() == [[1] * 13, [1] * 11 + [0, 0]]
    # row 0: 5 expanded tokens, 10 states, targets [SEP] 6 [CLS]; row 1: 3 tokens, 6 states, target 12
    assert seen.state_group.tolist() == [[0, 0, 1, 1, 2, 2, 3, 3, 4, 4], [0, 0, 1, 1, 2, 2, -1, -1, -1, -1]]
    assert seen.target_is_masked.tolist() == [[False, True, False], [True, False, False]]
    assert torch.isneginf(seen.log_transitions[1, :, 6:]).all() and torch.isneginf(seen.log_transitions[1, 6:]).all()
    torch.testing.assert_close(seen.log_transitions[1, :5, :6].logsumexp(-1), torch.zeros(5))
    # the analyses' logits are the masked tokens' states only
    assert seen.labels.tolist() == [6, 6, 12, 12]

    log_p = seen.state_logits.float().log_softmax(-1)
    for row, (n, targets) in enumerate([(5, [sep, 6, cls]), (3, [12])]):
        L = 2 * n
        log_emit = log_p[row, :L, targets].T[None]
        log_z = brute_force_log_z(log_emit, seen.log_transitions[row:row + 1, :L, :L])
        ends = log_p[row, 0, cls] + log_p[row, L - 1, sep]
        alone = (tokens[row:row + 1], {"masked_at": draws["masked_at"][row:row + 1]})
        torch.testing.assert_close(model(*alone).loss, -(log_z + ends)[0] / n, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(seen.log_z[row], model.inspect(*alone).log_z[0], rtol=1e-5, atol=1e-5)
    alone = [model(tokens[r:r + 1], {"masked_at": draws["masked_at"][r:r + 1]}).loss for r in (0, 1)]
    torch.testing.assert_close(model(tokens, draws).loss, (alone[0] + alone[1]) / 2, rtol=1e-5, atol=1e-5)
def test_next_token_prior_adds_its_nats_to_the_edges_into_the_next_tokens_states():
    """Query and key weights at zero: the transition logits are the prior alone. k = 2, M = 2
    masks: 8 states, 4 tokens ([CLS], two [MASK]s, [SEP]), 2 states each. From state 1 ([CLS]'s
    second) the 6 later states are 2 of the first [MASK] (logit 3) and 4 others (logit 0):
    E = e^3 / (2 e^3 + 4) to each of the two, 1 / (2 e^3 + 4) to the rest."""
    model = exlm(2, next_token_prior=3.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("transition_"):
                parameter.zero_()
    log_e = objective_inspection(model, blocks(1, SEQ), 0).log_transitions[0]
    assert log_e.shape == (8, 8)
    e3 = torch.exp(torch.tensor(3.0))
    expected = torch.log(torch.stack([e3, e3, *[torch.tensor(1.0)] * 4]) / (2 * e3 + 4))
    torch.testing.assert_close(log_e[1, 2:], expected)
    # from the first [MASK]'s first state (2): its own second state and the [SEP]'s are not the next token's
    expected = torch.log(torch.stack([torch.tensor(1.0), e3, e3, torch.tensor(1.0), torch.tensor(1.0)]) / (2 * e3 + 3))
    torch.testing.assert_close(log_e[2, 3:], expected)
    with pytest.raises(ValueError, match="next_token_prior needs learned transitions"):
        exlm(2, transitions="none", next_token_prior=1.0)
    with pytest.raises(ValueError, match="expected a number >= 0"):
        exlm(2, next_token_prior=-1.0)


@pytest.mark.parametrize("transitions,transition_input", [("dense", "states"), ("sparse", "states"), ("none", "states"),
                                                          ("dense", "states+position"),
                                                          ("sparse", "detached+position")])
def test_loss_is_the_brute_force_sum_over_alignments(transitions, transition_input):
    """-(log Z + log P_first([CLS]) + log P_last([SEP])) / (m + 2), with Z summed over all paths."""
    model = exlm(2, transitions=transitions, transition_input=transition_input).eval()
    model.encoder = Spy(model.encoder)
    tokens = blocks(2, SEQ)
    seen = objective_inspection(model, tokens, 4)
    (ids, kwargs), = model.encoder.calls
    mask_positions = kwargs["positions"][ids == SPECIALS.mask].view(2, M, 2)[:, :, 0]
    targets = tokens.gather(1, mask_positions)
    log_p = seen.state_logits.float().log_softmax(-1)
    log_emit = log_p.gather(2, targets[:, None, :].expand(-1, log_p.shape[1], -1)).transpose(1, 2)
    log_z = brute_force_log_z(log_emit, seen.log_transitions)
    ends = log_p[:, 0, SPECIALS.cls] + log_p[:, -1, SPECIALS.sep]
    loss = objective_step(model, tokens, 4).loss
    torch.testing.assert_close(loss, -((log_z + ends) / (M + 2)).mean(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knobs", [{}, {"transitions": "sparse"}, {"transitions": "none"}, {"rope2d": False},
                                   {"transition_input": "states"}, {"transition_input": "detached+position"},
                                   {"transitions": "ctc"}, {"transition_heads": 2}])
def test_overfits_a_tiny_batch_without_nan(knobs):
    model = exlm(2, **knobs)
    tokens = blocks(2, SEQ)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        out = objective_step(model, tokens, 1)
        optimizer.zero_grad()
        out.loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        optimizer.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0] - 0.1, losses


def test_without_rope2d_the_clones_are_indistinguishable():
    model = exlm(3, rope2d=False).eval()
    assert model.encoder.config.position_scheme == "rope"
    states = objective_inspection(model, blocks(1, SEQ), 0).state_logits[0].view(M + 2, 3, VOCAB)
    torch.testing.assert_close(states[:, 0], states[:, 2])
    with_2d = objective_inspection(exlm(3).eval(), blocks(1, SEQ), 0).state_logits[0].view(M + 2, 3, VOCAB)
    assert not torch.allclose(with_2d[:, 0], with_2d[:, 2])


@pytest.mark.parametrize("transitions", ["dense", "ctc"])
def test_forward_gives_training_the_loss_alone_and_inspect_the_dag(transitions):
    """Pretraining reads a loss and its count; the inspection of the same step holds the DAG the
    analyses read (none under ctc), and that loss is -(log Z + the ends' emissions) / (m + 2)
    from it, so the two cannot drift apart."""
    model = exlm(2, transitions=transitions)
    tokens = blocks(2, SEQ)
    out, seen = objective_step(model, tokens, 3), objective_inspection(model, tokens, 3)
    assert type(out) is ObjectiveOutput and [f.name for f in dataclasses.fields(out)] == ["loss", "num_predictions"]
    assert type(seen) is ExLMInspection and out.num_predictions == 2 * M
    L = 2 * (M + 2)
    assert seen.state_logits.shape == (2, L, VOCAB) and seen.log_z.shape == (2,)
    assert seen.state_group.shape == (2, L) and seen.target_is_masked.shape == (2, M)
    assert seen.logits.shape == (2 * M * 2, VOCAB) and seen.input_is_frame.shape == seen.input_is_mask.shape
    if transitions == "ctc":
        assert seen.log_transitions is None and seen.log_emissions is None
        return
    assert seen.log_transitions.shape == (2, L, L) and seen.log_emissions.shape == (2, M, L)
    log_p = seen.state_logits.float().log_softmax(-1)
    ends = log_p[:, 0, SPECIALS.cls] + log_p[:, -1, SPECIALS.sep]
    torch.testing.assert_close(out.loss, -((seen.log_z + ends) / (M + 2)).mean())


def test_a_training_step_builds_no_inspection(monkeypatch):
    """forward leaves out the copy of the masked states' logits (B m k, V) that only the analyses
    read; inspect makes it, and the loss is the same either way."""
    model, tokens = exlm(2), blocks(2, SEQ)
    inspected = objective_inspection(model, tokens, 3)
    gathered = []
    monkeypatch.setattr(exlm_module, "gather_rows", lambda *args: gathered.append(args) or inspected.logits)
    out = objective_step(model, tokens, 3)
    assert gathered == []
    objective_inspection(model, tokens, 3)
    assert len(gathered) == 1
    inspected_loss = model._step(tokens, seeded_draws(model, tokens, 3))[0].loss
    torch.testing.assert_close(out.loss, inspected_loss)


def test_inspection_labels_each_state_and_ranks_its_tokens():
    model = exlm(2).eval()
    seen = objective_inspection(model, blocks(2, SEQ), 0)
    assert seen.logits.shape == (2 * M * 2, VOCAB) and seen.labels.shape == (2 * M * 2,)
    ids, probs = model.top_tokens(seen.state_logits, 3)
    assert ids.shape == (2, 2 * (M + 2), 3) and (probs[..., :-1] >= probs[..., 1:]).all()
    # the predictions are the states of the masked targets, in order, each labelled with its token
    group = seen.state_group
    target = (group - 1).clamp(0, M - 1)
    of_mask = (group >= 1) & (group <= M) & seen.target_is_masked.gather(1, target)
    assert torch.equal(seen.logits, seen.state_logits[of_mask])
    tokens = blocks(2, SEQ)
    masked_at = model.draw(tokens, torch.Generator().manual_seed(0))["masked_at"]
    assert torch.equal(seen.labels, tokens.gather(1, masked_at).repeat_interleave(2, dim=1).flatten())


@pytest.mark.parametrize("k", [1, 2, 3])
def test_finetuning_layout_is_the_pretraining_layout_without_mask(k):
    """A sequence fine-tunes as pretraining would see it with no [MASK]: the same ids, positions
    and clone indices (its [CLS] and [SEP] expanded into k states), so the same states. A
    shorter sequence padded beside it (pretraining blocks have none) keeps its own layout,
    padding after it."""
    model = exlm(k).eval()
    full, short = blocks(1, SEQ, seed=0), blocks(1, SEQ - 3, seed=1)
    batch = torch.cat([full, torch.cat([short, torch.full((1, 3), SPECIALS.pad)], dim=1)])
    mask = (batch != SPECIALS.pad).long()
    inputs = finetune_inputs(model.pretraining_info(), batch, mask).encoder_kwargs
    finetuned = model.encoder(**inputs).last_hidden_state
    for row, tokens in enumerate([full, short]):
        unmasked = torch.zeros(1, 0, dtype=torch.long)
        ids, layout = model.expand(tokens, torch.zeros_like(tokens, dtype=torch.bool),
                                   model.expanded_positions(tokens, unmasked))
        positions, clone = layout.source, layout.clone
        n = ids.shape[1]
        assert inputs["input_ids"][row, :n].tolist() == ids[0].tolist()
        assert inputs["positions"][row, :n].tolist() == positions[0].tolist()
        assert inputs["clone_index"][row, :n].tolist() == clone[0].tolist()
        assert inputs["attention_mask"][row].tolist() == [1] * n + [0] * (inputs["input_ids"].shape[1] - n)
        pretrained = model.encoder(ids, positions=positions, clone_index=clone).last_hidden_state
        torch.testing.assert_close(finetuned[row, :n], pretrained[0], rtol=1e-5, atol=1e-5)


def test_padded_pair_batch_expands_every_cls_and_sep_and_aligns_tokens():
    """Pairs of different lengths ([CLS] a [SEP] b [SEP], right-padded) and a full-length single
    sentence: every [CLS] and [SEP] becomes k = 2 states; `first` pooling reads the first [CLS]
    state, `mean` pooling every real state; token-level heads (QA) read each input token's first state."""
    cls, sep, pad = SPECIALS.cls, SPECIALS.sep, SPECIALS.pad
    batch = torch.tensor([[cls, 5, 6, sep, 7, sep, pad, pad],
                          [cls, 8, sep, 9, 10, 11, 12, sep],
                          [cls, 13, 14, 15, 16, 17, 18, sep]])
    mask = (batch != pad).long()
    model = exlm(2).eval()
    inputs = finetune_inputs(model.pretraining_info(), batch, mask)
    kwargs = inputs.encoder_kwargs
    assert kwargs["input_ids"][0].tolist() == [cls, cls, 5, 6, sep, sep, 7, sep, sep, pad, pad]
    assert kwargs["positions"][0].tolist() == [0, 0, 1, 2, 3, 3, 4, 5, 5, 6, 7]
    assert kwargs["clone_index"].tolist() == [[1, 2, 0, 0, 1, 2, 0, 1, 2, 0, 0],
                                              [1, 2, 0, 1, 2, 0, 0, 0, 0, 1, 2],
                                              [1, 2, 0, 0, 0, 0, 0, 0, 1, 2, 0]]
    # the single sentence has one [SEP] fewer: its last slot is padding
    assert kwargs["attention_mask"].tolist() == [[1] * 9 + [0] * 2, [1] * 11, [1] * 10 + [0]]
    assert inputs.token_index[0].tolist() == [0, 2, 3, 4, 6, 7, 9, 10]
    assert inputs.pool_position.tolist() == [0, 0, 0]
    assert torch.equal(kwargs["input_ids"].gather(1, inputs.token_index), batch)

    model.encoder.config.pretraining = model.pretraining_info()   # as pretraining saves it
    view = EncoderView(model.encoder, pooling="first").eval()  # as the official ExLM code pools
    out = view(batch, mask)
    states = model.encoder(**kwargs).last_hidden_state
    assert out.states.shape == (*batch.shape, states.shape[-1])
    torch.testing.assert_close(out.pooled, states[:, 0])
    # mean pooling (the default): over the encoder's real states, the k states of [CLS]/[SEP] included
    real = kwargs["attention_mask"][..., None].to(states.dtype)
    torch.testing.assert_close(EncoderView(model.encoder).eval()(batch, mask).pooled,
                               (states * real).sum(1) / real.sum(1))
    torch.testing.assert_close(out.states[0, 4], states[0, 6])      # token 4 (7) reads slot 6
    torch.testing.assert_close(out.states[1, 7], states[1, 9])      # the last [SEP]'s first state
    layers = view.layer_states(batch, mask)
    assert len(layers.hidden_states) == model.encoder.config.n_layer + 1
    assert all(h.shape == states.shape for h in layers.hidden_states)
    torch.testing.assert_close(layers.hidden_states[-1], states)
    assert torch.equal(layers.attention_mask, kwargs["attention_mask"])


def test_finetuning_without_rope2d_passes_no_clone_index():
    model = exlm(2, rope2d=False).eval()
    batch = blocks(1, SEQ)
    inputs = finetune_inputs(model.pretraining_info(), batch, torch.ones_like(batch))
    assert "clone_index" not in inputs.encoder_kwargs
    assert inputs.encoder_kwargs["input_ids"].shape == (1, SEQ + 2)


def test_transition_logits_stay_float32_under_bf16_autocast():
    """Autocast would run Q Kᵀ in bf16 (and a .float() on its inputs would not stop it): the
    transition scores must come out float32 and equal to the float32 computation."""
    model = exlm(2)
    g = torch.Generator().manual_seed(0)
    states = torch.randn(2, 8, model.encoder.config.n_embd, generator=g) * 4
    state_token = (torch.arange(8) // 2).expand(2, 8)               # two states per token
    nodes = torch.arange(8).expand(2, 8)
    expected = model.log_transitions(states, state_token, nodes)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = model.transition_scores(states.bfloat16(), nodes)
        log_e = model.log_transitions(states, state_token, nodes)
    assert scores.dtype == log_e.dtype == torch.float32
    torch.testing.assert_close(log_e, expected)
    torch.testing.assert_close(scores, model.transition_scores(states.bfloat16().float(), nodes))


@pytest.mark.parametrize("transition_input", ["states+position", "detached+position"])
def test_transitions_with_position_see_where_a_state_is(transition_input):
    """With the position embedding two states with the same H are scored differently when they
    sit at different indices of the expanded input; from H alone (the paper's equation) they
    cannot be, and there is no position embedding to train."""
    same = torch.randn(1, 1, 32, generator=torch.Generator().manual_seed(0)).expand(1, 6, 32)
    nodes = torch.tensor([[0, 2, 3, 7, 8, 11]])
    scores = exlm(2, transition_input=transition_input).transition_scores(same, nodes)[0]
    assert not torch.allclose(scores[0, 1:], scores[0, 1:2].expand(5))
    paper = exlm(2, transition_input="states")
    assert not any("position" in name for name, _ in paper.named_parameters())
    flat = paper.transition_scores(same, nodes)[0]
    torch.testing.assert_close(flat[0, 1:], flat[0, 1:2].expand(5))


@pytest.mark.parametrize("transition_input,reaches_encoder", [("states", True), ("states+position", True),
                                                              ("detached+position", False)])
def test_detached_transitions_send_no_gradient_into_the_encoder(transition_input, reaches_encoder):
    """`detached+position`: the transitions learn from the DAG loss, the encoder only from the
    emissions (docs/notes/2026-11-24-a-recipe-that-learns.md: the transitions' gradient kept text
    ExLM at the unigram loss)."""
    model = exlm(2, transition_input=transition_input)
    log_e = objective_inspection(model, blocks(2, SEQ), 0).log_transitions
    log_e[torch.isfinite(log_e)].sum().backward()
    encoder_grads = [p.grad for p in model.encoder.parameters() if p.grad is not None and p.grad.abs().sum() > 0]
    assert bool(encoder_grads) == reaches_encoder
    assert model.transition_query.weight.grad.abs().sum() > 0


def test_the_position_table_covers_the_longest_expanded_block():
    """Every token but the ends masked: the expanded input is k·SEQ long, the table's size."""
    model = exlm(3, transition_input="states+position")
    out = model(blocks(1, SEQ), {"masked_at": torch.arange(1, SEQ - 1)[None]})
    assert model.transition_position.num_embeddings == 3 * SEQ
    assert torch.isfinite(out.loss)


def test_the_dag_length_prior_benchmark_counts_paths_by_hand():
    """benchmarks/dag_length_prior.py: with uniform transitions, L = 4 and m = 2 have one path
    0→1→2→3 of probability 1/3 · 1/2; L = 5 and m = 1 the paths 0→u→4, Σ_u 1/4 · 1/(4 - u)."""
    import importlib.util
    import math

    spec = importlib.util.spec_from_file_location("dag_length_prior", REPO / "benchmarks/dag_length_prior.py")
    prior = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prior)
    assert math.isclose(prior.length_cost_per_token(4, 2), math.log(6) / 2)
    assert math.isclose(prior.length_cost_per_token(5, 1), -math.log((1 / 3 + 1 / 2 + 1) / 4))


def test_one_token_ctc_sums_the_three_paths_of_two_states_by_hand():
    """k = 2 states, target a, blank ∅: the paths "a a", "a ∅" and "∅ a" collapse to a, nothing else."""
    p_a, p_blank = torch.tensor([0.5, 0.2]), torch.tensor([0.3, 0.6])
    by_hand = 0.5 * 0.2 + 0.5 * 0.6 + 0.3 * 0.2                      # 0.46
    torch.testing.assert_close(one_token_ctc_nll(p_a.log(), p_blank.log()), -torch.tensor(by_hand).log())


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_one_token_ctc_is_torchs_ctc_loss(k):
    log_p = torch.randn(6, k, 7, generator=torch.Generator().manual_seed(k)).log_softmax(-1)  # blank: 4
    targets = torch.tensor([0, 1, 2, 3, 5, 6])
    ours = one_token_ctc_nll(log_p.gather(2, targets[:, None, None].expand(6, k, 1))[..., 0], log_p[..., 4])
    theirs = F.ctc_loss(log_p.transpose(0, 1), targets[:, None], [k] * 6, [1] * 6, blank=4, reduction="none")
    torch.testing.assert_close(ours, theirs)


def test_ctc_loss_of_a_step_is_each_tokens_own_states_by_hand():
    """`transitions: ctc` (the official "w/o transitions"): every expanded token, [CLS]/[SEP]
    included, emitted by its own k = 2 states, P = a₁a₂ + a₁∅₂ + ∅₁a₂ with ∅ the [UNK]; a row's
    loss is the sum over its expanded tokens over their count, the batch's the mean of rows; a
    masked [UNK] (the blank itself) counts in neither. log Z: the tokens between the ends."""
    cls, sep, unk = WITH_UNK.cls, WITH_UNK.sep, WITH_UNK.unk
    tokens = torch.tensor([[cls, 5, sep, 6, 7, cls, 8, sep],
                           [cls, 9, unk, 11, 12, 13, 14, sep]])
    model = make("exlm", {"k": 2, "mask_ratio": RATIO, "transitions": "ctc"}, seq_len=8, specials=WITH_UNK).eval()
    assert not any("transition" in name for name, _ in model.named_parameters())
    draws = {"masked_at": torch.tensor([[3], [2]])}
    seen = model.inspect(tokens, draws)
    assert seen.log_transitions is None and seen.log_emissions is None
    p = seen.state_logits.float().softmax(-1)

    def nll(row, i, token):   # the row's expanded token i: states 2i and 2i + 1
        a1, a2, b1, b2 = p[row, 2 * i, token], p[row, 2 * i + 1, token], p[row, 2 * i, unk], p[row, 2 * i + 1, unk]
        return -torch.log(a1 * a2 + a1 * b2 + b1 * a2)

    row0 = [nll(0, i, token) for i, token in enumerate([cls, sep, 6, cls, sep])]
    row1 = [nll(1, 0, cls), nll(1, 2, sep)]                            # its token 1 is the masked [UNK]
    torch.testing.assert_close(model(tokens, draws).loss, (sum(row0) / 5 + sum(row1) / 2) / 2)
    torch.testing.assert_close(seen.log_z, -torch.stack([row0[1] + row0[2] + row0[3], torch.tensor(0.0)]))


def test_ctc_needs_the_tokenizers_unk_as_its_blank():
    with pytest.raises(ValueError, match=r"\[UNK\]"):
        make("exlm", {"k": 2, "transitions": "ctc"}, specials=SPECIALS)


def test_one_transition_head_is_the_single_head_transitions_exactly():
    default, one = exlm(2), exlm(2, transition_heads=1)
    assert [n for n, _ in default.named_parameters()] == [n for n, _ in one.named_parameters()]
    a, b = (objective_inspection(model, blocks(2, SEQ), 0) for model in (default, one))
    assert torch.equal(a.log_transitions, b.log_transitions)
    assert torch.equal(*(objective_step(model, blocks(2, SEQ), 0).loss for model in (default, one)))


@pytest.mark.parametrize("gate", ["hand-set", "learned"])
def test_two_gated_heads_mix_each_heads_softmax_by_hand(gate):
    """E[v, u] = Σ_h g_h(v) softmax_u>v(q_h(v) · k_h(u) / √16) with q_h, k_h the 16-wide chunks h of
    the 32-wide Q and K, and g(v) the gate at the source state v: hand-set to (0.25, 0.75) for
    every state, or learned (a softmax of a linear map of v's features)."""
    model = exlm(2, transition_heads=2, transition_input="states")
    if gate == "hand-set":
        with torch.no_grad():
            model.transition_gate.weight.zero_()
            model.transition_gate.bias.copy_(torch.tensor([0.25, 0.75]).log())
    states = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(0))
    log_e = model.log_transitions(states, (torch.arange(6) // 2)[None], torch.arange(6)[None])[0]
    with torch.no_grad():
        q, k = model.transition_query(states[0]), model.transition_key(states[0])
        weights = (torch.tensor([[0.25, 0.75]] * 6) if gate == "hand-set"
                   else model.transition_gate(states[0]).softmax(-1))
        for v in range(5):
            heads = [torch.softmax(q[v, 16 * h:16 * (h + 1)] @ k[v + 1:, 16 * h:16 * (h + 1)].T / 4, -1)
                     for h in (0, 1)]
            torch.testing.assert_close(log_e[v, v + 1:].exp(), weights[v, 0] * heads[0] + weights[v, 1] * heads[1])
            assert torch.isneginf(log_e[v, :v + 1]).all()
    assert torch.isneginf(log_e[5]).all()


def test_transition_heads_need_learned_transitions_and_split_the_width():
    with pytest.raises(ValueError, match="transition_heads=2 mixes learned transitions"):
        exlm(2, transitions="none", transition_heads=2)
    with pytest.raises(ValueError, match="do not split the width"):
        exlm(2, transition_heads=3)
    model = exlm(2, transition_heads="encoder")
    assert model.transition_heads == model.encoder.config.n_head == 2
    assert model.pretraining_info()["transition_heads"] == 2


def test_attention_gets_no_mask_when_no_row_is_padded(monkeypatch):
    """Issue 66 (2): a mask rules out SDPA's flash kernel, so an unpadded batch (every row
    expands as many tokens: one mask per row and no inner [CLS]/[SEP]) passes none, and the
    draws say so without a sync in the step; a padded batch still masks its padding."""
    model = make("exlm", {"k": 2, "mask_ratio": RATIO}, seq_len=8).eval()
    cls, sep = SPECIALS.cls, SPECIALS.sep
    tokens = torch.tensor([[cls, 5, 6, 7, 8, 9, 10, sep], [cls, 9, 10, 11, 12, 13, 14, sep]])
    seen = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **kw: seen.append(kw["attn_mask"]) or sdpa(*a, **kw))
    draws = model.draw(tokens, torch.Generator().manual_seed(0))
    assert draws["padded"] is False
    model(tokens, draws)
    assert seen and all(mask is None for mask in seen)
    seen.clear()
    padded = torch.tensor([[cls, 5, sep, 6, 7, cls, 8, sep], [cls, 9, 10, 11, 12, 13, 14, sep]])
    draws = model.draw(padded, torch.Generator().manual_seed(0))
    assert draws["padded"] is True
    model(padded, draws)
    assert seen and all(mask is not None for mask in seen)
    assert model.take(draws, slice(0, 1))["padded"] is True            # a fact of the whole batch


def test_unmasked_and_masked_attention_give_the_same_loss_without_padding():
    model = make("exlm", {"k": 2, "mask_ratio": RATIO}, seq_len=8).eval()
    tokens = blocks(3, 8)
    draws = model.draw(tokens, torch.Generator().manual_seed(1))
    assert draws["padded"] is False
    torch.testing.assert_close(model(tokens, draws).loss, model(tokens, {**draws, "padded": True}).loss)


def test_log_normaliser_is_float32_logsumexp_without_a_float32_copy_of_the_logits(monkeypatch):
    """Issue 66 (2): bf16 logits (B, L, V) are normalised in float32 a chunk of rows at a time;
    autograd keeps the bf16 logits and the (B, L) result, no float32 (B, L, V) tensor."""
    monkeypatch.setattr(exlm_module, "LOG_NORM_CHUNK_ELEMENTS", 3 * 50)        # 3 rows of V = 50 a chunk
    logits = (torch.randn(2, 7, 50, generator=torch.Generator().manual_seed(0)) * 4).bfloat16().requires_grad_(True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        log_norm = exlm_module.log_normaliser(logits)
    assert log_norm.dtype == torch.float32
    assert not any(t.dtype == torch.float32 and t.numel() >= logits.numel() for t in saved)
    torch.testing.assert_close(log_norm, logits.float().logsumexp(-1))
    weight = torch.randn(2, 7)
    (log_norm * weight).sum().backward()
    expected = (torch.softmax(logits.detach().float(), -1) * weight[..., None]).bfloat16()
    torch.testing.assert_close(logits.grad, expected)


def test_log_normaliser_gradcheck():
    logits = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(exlm_module.log_normaliser, (logits,))
