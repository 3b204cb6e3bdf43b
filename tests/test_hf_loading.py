"""A pretrained checkpoint is a Hugging Face model directory that loads without maskbench: in a
fresh process that imports only transformers, `AutoModelForMaskedLM` and `pipeline("fill-mask")`
load it by its saved code (`trust_remote_code=True`), with the weights maskbench trained; an AR
checkpoint loaded with `AutoModel` attends causally; the tokenizer knows the longest input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from maskbench.model.encoder import Encoder, EncoderForMaskedLM, causal_mask
from tests.helpers import run_pretrain, smoke_config

pytestmark = pytest.mark.usefixtures("tracking_store")

SEQ_LEN = 32  # smoke_config's pretraining block length
MASKED = [2, 6, 7, 4, 8, 3]  # [CLS] a b [MASK] c [SEP]

# What a user of the Hugging Face libraries does with the two checkpoints (`mlm`, `ar`: their
# directories), reported as JSON to `result`; one process for both, since importing
# transformers' pipelines takes most of the time.
USER = """
import json, sys, torch, transformers

mlm = transformers.AutoModelForMaskedLM.from_pretrained(mlm_dir, trust_remote_code=True).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(mlm_dir, trust_remote_code=True)  # as docs/huggingface.md
with torch.no_grad():
    masked = mlm(torch.tensor([MASKED]))
fill = transformers.pipeline("fill-mask", model=mlm_dir, trust_remote_code=True, top_k=3)

ar = transformers.AutoModel.from_pretrained(ar_dir, trust_remote_code=True).eval()
ids = torch.tensor([[2, 6, 7, 8, 3], [2, 6, 7, 9, 3]])  # the same but for the fourth token
with torch.no_grad():
    causal = ar(ids)
    full = ar(ids, attn_mask=torch.ones(1, 1, 5, 5, dtype=torch.bool)).last_hidden_state
try:
    transformers.AutoModelForMaskedLM.from_pretrained(ar_dir, trust_remote_code=True)
    refused = None
except ValueError as error:
    refused = str(error)

states = causal.last_hidden_state
seen = {"mlm_output": type(masked).__name__, "logits": masked.logits[0].tolist(),
        "filled": fill("the cat sat on the " + tokenizer.mask_token), "max_length": tokenizer.model_max_length,
        "truncated": len(tokenizer("the cat " * 40, truncation=True)["input_ids"]),
        "ar_output": type(causal).__name__, "refused": refused,
        "first_same": torch.equal(states[0, :3], states[1, :3]), "fourth_same": torch.equal(states[0, 3], states[1, 3]),
        "bidirectional_first_same": torch.equal(full[0, 0], full[1, 0])}
assert "maskbench" not in sys.modules
open(result, "w").write(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def checkpoints(corpus, tmp_path_factory) -> dict:
    """The saved model directories of an `mlm` and an `ar` run, two steps each."""
    root = tmp_path_factory.mktemp("hf")
    for run in ("mlm", "ar"):
        run_pretrain(smoke_config(steps=2), run, corpus, root / run)
    return {run: root / run / "model" for run in ("mlm", "ar")}


@pytest.fixture(scope="module")
def seen(checkpoints, tmp_path_factory) -> dict:
    """What `USER` saw, run in a fresh Python with maskbench's sources off the path."""
    scratch = tmp_path_factory.mktemp("user")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(scratch / "hf_modules")  # where transformers imports the saved code from
    values = {"mlm_dir": str(checkpoints["mlm"]), "ar_dir": str(checkpoints["ar"]), "MASKED": MASKED,
              "result": str(scratch / "seen.json")}
    script = "".join(f"{name} = {value!r}\n" for name, value in values.items()) + USER
    # stdin closed and a time limit: a "run the custom code? [y/N]" prompt reads EOF or times out
    done = subprocess.run([sys.executable, "-c", script], cwd=scratch, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((scratch / "seen.json").read_text()) | {"output": done.stdout + done.stderr}


@pytest.mark.slow
def test_a_checkpoint_fills_a_mask_in_a_process_without_maskbench(checkpoints, seen):
    files = {p.name for p in checkpoints["mlm"].iterdir()}
    assert {"encoder.py", "positions.py", "model.safetensors", "config.json", "tokenizer.json"} <= files
    assert seen["mlm_output"] == "MaskedLMOutput"
    encoder = Encoder.from_pretrained(checkpoints["mlm"]).eval()  # the weights maskbench trained, loaded here
    with torch.no_grad():
        expected = encoder.lm_logits(encoder(torch.tensor([MASKED])).last_hidden_state)[0]
    assert torch.allclose(torch.tensor(seen["logits"]), expected, atol=1e-5)
    filled = seen["filled"]
    assert len(filled) == 3 and [f["score"] for f in filled] == sorted((f["score"] for f in filled), reverse=True)
    assert all(f["sequence"] == f"the cat sat on the {f['token_str']}" for f in filled)


@pytest.mark.slow
def test_nothing_the_docs_load_asks_to_run_custom_code(seen):
    """AutoTokenizer reads config.json, whose auto_map is custom code: without
    trust_remote_code=True (docs/huggingface.md shows it) it asks on the terminal and waits."""
    assert "Do you wish to run the custom code" not in seen["output"]


@pytest.mark.slow
def test_the_tokenizer_truncates_to_the_pretraining_length(seen):
    assert seen["max_length"] == SEQ_LEN and seen["truncated"] == SEQ_LEN


@pytest.mark.slow
def test_an_ar_checkpoint_attends_causally_where_it_was_trained_to(seen):
    assert seen["ar_output"] == "BaseModelOutput"
    assert seen["first_same"] and not seen["fourth_same"]  # the states before the changed token do not move
    assert not seen["bidirectional_first_same"]            # as they would under full attention
    assert "causal mask (objective 'ar')" in seen["refused"]  # and it is no masked LM


def test_a_causal_encoder_attends_as_its_objective_passed_the_mask(checkpoints):
    """In maskbench too: `config.causal` with no mask equals the AR objective's explicit mask."""
    encoder = Encoder.from_pretrained(checkpoints["ar"]).eval()
    ids = torch.tensor([[2, 6, 7, 8, 3]])
    assert encoder.config.causal and not Encoder.from_pretrained(checkpoints["mlm"]).config.causal
    with torch.no_grad():
        assert torch.equal(encoder(ids).last_hidden_state, encoder(ids, attn_mask=causal_mask(5)).last_hidden_state)


def test_in_a_maskbench_process_the_auto_classes_load_maskbench_s_encoder_without_remote_code(checkpoints):
    """Importing maskbench's encoder registers it with transformers' auto classes, so a
    checkpoint loads as maskbench's own class (not a copy of its saved code)."""
    import transformers

    model = transformers.AutoModelForMaskedLM.from_pretrained(checkpoints["mlm"])
    assert type(model) is EncoderForMaskedLM
    assert type(transformers.AutoModel.from_pretrained(checkpoints["mlm"])) is Encoder
