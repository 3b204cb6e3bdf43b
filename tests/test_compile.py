"""torch.compile captures every objective whole: `fullgraph=True` (any graph break is an error),
forward and backward, with the same loss and gradients as eager mode.

What makes that possible (see Objective): the random choices of a step are drawn from the
step's torch.Generator by `objective.draw`, outside the graph, which starts at `forward` and
has no host syncs or data-dependent shapes, and ExLM's states-alignment DP is a custom operator the graph
calls as a whole. The tests compile with `aot_eager` (dynamo and AOTAutograd: where graph breaks
and untraceable backward passes show) on every objective, and with the default inductor backend
(code generation too). All are slow tests (3-10 s a compile): they run in CI, not in the fast
suite."""

import pytest
import torch
from torch._dynamo.utils import counters

from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import build_objective, encoder_settings
from tests.helpers import PRETRAINED_OBJECTIVES, TEST_KNOBS, VOCAB, WITH_UNK, blocks, objective_run, objective_step

pytestmark = pytest.mark.slow

SEQ_LEN = 16
# shapes fixed by the knobs (for exlm also by the most [CLS]/[SEP] a block holds, which these blocks
# fix): the graph compiled at the first step serves every later one
STATIC = {"mlm", "repeated_mlm", "mae_lm", "exlm", "ar"}


def make(objective: str, n_layer: int = 1, knobs: dict | None = None):
    torch.manual_seed(0)
    run = objective_run(objective, {**TEST_KNOBS.get(objective, {}), **(knobs or {})})
    config = EncoderConfig(vocab_size=VOCAB, n_layer=n_layer, n_embd=32, n_head=2, n_inner=64, dropout=0.0,
                           **encoder_settings(run, SEQ_LEN, "rope"))
    return build_objective(run, Encoder(config), WITH_UNK)


def loss_and_grads(model, tokens, seed):
    out = objective_step(model, tokens, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(out.loss, params, allow_unused=True)
    return out, [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def check_against_eager(name, backend, seeds, tolerance, knobs=None):
    model = make(name, knobs=knobs)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    tokens = blocks(batch=4, seq_len=SEQ_LEN)
    for seed in seeds:
        eager, eager_grads = loss_and_grads(model, tokens, seed)
        out, grads = loss_and_grads(compiled, tokens, seed)
        torch.testing.assert_close(out.loss, eager.loss, **tolerance)
        assert out.num_predictions == eager.num_predictions
        for g, e in zip(grads, eager_grads):
            torch.testing.assert_close(g, e, **tolerance)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", PRETRAINED_OBJECTIVES)
def test_every_objective_compiles_as_one_graph(name):
    """Three steps with different masks: one graph each way (forward, backward), and for the
    objectives whose shapes the knobs fix, no recompilation after the first step."""
    check_against_eager(name, "aot_eager", seeds=(1, 2, 3), tolerance={})
    graphs = counters["stats"]["unique_graphs"]
    if name in STATIC:
        assert graphs == 1, f"{name}: {graphs} graphs"
    else:   # counts that vary by batch (varlen_mlm's masks, dar's predicted positions): dynamic
        assert graphs <= 2, f"{name}: {graphs} graphs"


@pytest.mark.parametrize("name", PRETRAINED_OBJECTIVES)
def test_every_objective_compiles_for_blocks_of_varying_length(name):
    """`blocks: documents` gives each step another block length (maskbench.train.blocks): the
    first length's graph, then dynamic ones that serve every later length, each step as eager
    computes it. Three at most: torch specialises a size of 1, so blocks with one masked token
    (here 11, 7 and 9 tokens long) get their own graph beside the one for more."""
    model = make(name)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    for step, length in enumerate((16, 11, 7, 13, 9, 15)):
        tokens = blocks(batch=4, seq_len=length, seed=step)
        eager, eager_grads = loss_and_grads(model, tokens, step)
        out, grads = loss_and_grads(compiled, tokens, step)
        torch.testing.assert_close(out.loss, eager.loss)
        for g, e in zip(grads, eager_grads):
            torch.testing.assert_close(g, e)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs <= 3, f"{name}: {graphs} graphs for 6 lengths"


@pytest.mark.parametrize("knobs", [{"transitions": "ctc"}, {"transition_heads": 2}])
def test_exlm_official_readings_compile_as_one_graph(knobs):
    """The per-[MASK] CTC (a recursion, not F.ctc_loss, which has no fake kernel) and the gated heads."""
    check_against_eager("exlm", "aot_eager", seeds=(1, 2), tolerance={}, knobs=knobs)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("name", PRETRAINED_OBJECTIVES)
def test_every_objective_compiles_with_inductor(name):
    check_against_eager(name, "inductor", seeds=(1,), tolerance={"rtol": 1e-4, "atol": 1e-5})


def test_exlm_graph_calls_the_alignment_operators():
    """The DP is not traced into (its fallbacks branch on data): the graph calls it whole."""
    from torch._dynamo.testing import AotEagerAndRecordGraphs
    backend = AotEagerAndRecordGraphs()
    model = make("exlm")
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    objective_step(compiled, blocks(batch=2, seq_len=SEQ_LEN), 0).loss.backward()
    forward, = backend.fw_graphs
    backward, = backend.bw_graphs
    assert "maskbench.dag_forward" in str(forward.code)
    assert "maskbench.dag_backward" in str(backward.code)
