"""Memory bounded at paper scale. The probe writes its features to disk-backed arrays (one memmap
per split, in a temporary directory beside the metrics, gone after success and failure) and
fits one layer at a time, so its peak memory does not grow with the encoder's depth. Generation
perplexity's causal reading runs the encoder on batches of blocks bounded by
`generation_perplexity.rows` and gives what the all-at-once computation gives."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

from maskbench.analysis.perplexity import batched_causal_nll, causal_nll, generation_perplexity, masked_nll
from maskbench.controls import probe as probe_module
from maskbench.controls.probe import layer_features, probe
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import SpecialTokens, build_objective
from tests.helpers import finetune_outputs, task_files, tiny_encoder, with_task

pytestmark = pytest.mark.usefixtures("tracking_store")

WORDS = "the cat sat on the mat while a dog ran in the park and bird sang".split()
SPECIALS = SpecialTokens(pad=0, cls=1, sep=2, mask=3)


def sequences_seen(encoder: torch.nn.Module) -> list[int]:
    """The number of sequences each call of `encoder` reads, appended as it runs."""
    seen = []
    encoder.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(len(args[0] if args else kwargs["input_ids"])), with_kwargs=True)
    return seen


class LayerReads:
    """An array that records the index of every read."""

    def __init__(self, array: np.ndarray):
        self.array, self.reads = array, []

    def __getitem__(self, index):
        self.reads.append(index)
        return self.array[index]


def regression_task(root: Path, config: dict, sizes: dict[str, int]) -> dict:
    """A text regression task of seeded random sentences (label: the length), `sizes` rows a split."""
    rng = np.random.default_rng(0)
    rows = {}
    for split, n in sizes.items():
        texts = [" ".join(rng.choice(WORDS, rng.integers(1, 12))) for _ in range(n)]
        rows[split] = [{"text": t, "text_pair": None, "label": float(len(t))} for t in texts]
    task_files(root, rows, "regression")
    return with_task(config, "length", "text", "regression", "rmse")


def encoder_of_depth(tokenizer, out_dir: Path, n_layer: int, n_embd: int) -> None:
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=len(tokenizer), n_layer=n_layer, n_embd=n_embd, n_head=2, n_inner=32,
                                    max_position=64, pad_token_id=tokenizer.pad_token_id))
    encoder.config.pretraining = {"objective": "mlm", "run": "mlm"}
    encoder.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


# --- probe ----------------------------------------------------------------------------------


def test_layer_features_go_into_a_memmap_batch_by_batch_at_their_rows(tiny_tokenizer, tmp_path):
    encoder = tiny_encoder(tiny_tokenizer, tmp_path / "model").eval()
    texts = ["the cat sat on the mat", "a dog", "the cat sat on the mat while a dog ran", "the bird", "sang"]
    ids = tiny_tokenizer(texts)["input_ids"]
    pad = tiny_tokenizer.pad_token_id
    alone = np.concatenate([layer_features(encoder, [row], pad, 1, "cpu") for row in ids], axis=1)
    store = np.lib.format.open_memmap(tmp_path / "features.npy", mode="w+", dtype=np.float32, shape=(3, len(ids), 16))
    seen = sequences_seen(encoder)
    assert layer_features(encoder, ids, pad, 2, "cpu", out=store) is store
    assert max(seen) == 2  # one batch at a time, written straight into the file
    store.flush()
    np.testing.assert_allclose(np.load(tmp_path / "features.npy"), alone, atol=1e-5)  # in row order


def test_probe_fits_each_layer_from_that_layer_of_disk_backed_features(config, tiny_tokenizer, tmp_path, monkeypatch):
    encoder_of_depth(tiny_tokenizer, tmp_path / "model", 3, 16)
    config = regression_task(tmp_path, config, {"train": 40, "dev": 10, "test": 10})
    fit_layer, reads, stores = probe_module.fit_layer, [], []

    def recorded(data, features, layer, controls):
        stores.append({split: (type(f), Path(f.filename).parent, f.shape) for split, f in features.items()})
        wrapped = {split: LayerReads(f) for split, f in features.items()}
        fit = fit_layer(data, wrapped, layer, controls)
        reads.append({split: w.reads for split, w in wrapped.items()})
        return fit

    monkeypatch.setattr(probe_module, "fit_layer", recorded)
    metrics = probe(config, "mlm", "length", tmp_path / "model", tmp_path / "task", tmp_path / "card.json",
                    *finetune_outputs(tmp_path / "out"))
    assert len(metrics["layers"]) == 4
    assert reads == [{"train": [layer], "dev": [layer], "test": [layer]} for layer in range(4)]
    directory = stores[0]["train"][1]
    assert directory.parent == tmp_path / "out" and directory.name.startswith(".features-")
    assert all(store == {"train": (np.memmap, directory, (4, 40, 16)), "dev": (np.memmap, directory, (4, 10, 16)),
                         "test": (np.memmap, directory, (4, 10, 16))} for store in stores)


def test_probe_peak_memory_does_not_grow_with_the_encoders_depth(config, tiny_tokenizer, tmp_path):
    """Numpy's allocations (tracemalloc sees them; the encoder's torch tensors it does not): 13
    layers of 2,500 rows x 64 floats are 8.3 MB, which the old in-memory features all held."""
    sizes, width = {"train": 1500, "dev": 500, "test": 500}, 64
    one_layer = sum(sizes.values()) * width * 4
    peaks = {}
    for depth in (2, 12):
        root = tmp_path / f"depth{depth}"
        encoder_of_depth(tiny_tokenizer, root / "model", depth, width)
        task_config = regression_task(root, config, sizes)
        tracemalloc.start()
        try:
            probe(task_config, "mlm", "length", root / "model", root / "task", root / "card.json",
                  *finetune_outputs(root / "out"))
            peaks[depth] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peaks[12] - peaks[2] < 2 * one_layer  # ten more layers, less than two more layers' worth
    assert peaks[12] < 13 * one_layer / 2


def test_probe_removes_its_feature_directory_after_success_and_after_failure(config, tiny_tokenizer, tmp_path,
                                                                              monkeypatch):
    encoder_of_depth(tiny_tokenizer, tmp_path / "model", 2, 16)
    config = regression_task(tmp_path, config, {"train": 40, "dev": 10, "test": 10})
    fit_layer, directories = probe_module.fit_layer, []

    def failing_at(layer_to_fail):
        def fit(data, features, layer, controls):
            directories.append(Path(features["train"].filename).parent)
            assert directories[-1].is_dir()
            if layer == layer_to_fail:
                raise RuntimeError("fit failed")
            return fit_layer(data, features, layer, controls)
        return fit

    args = ("mlm", "length", tmp_path / "model", tmp_path / "task", tmp_path / "card.json")
    monkeypatch.setattr(probe_module, "fit_layer", failing_at(None))
    probe(config, *args, *finetune_outputs(tmp_path / "done"))
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == ["metrics.json", "predictions.jsonl"]
    monkeypatch.setattr(probe_module, "fit_layer", failing_at(1))
    with pytest.raises(RuntimeError, match="fit failed"):
        probe(config, *args, *finetune_outputs(tmp_path / "failed"))
    assert list((tmp_path / "failed").iterdir()) == []
    assert len(directories) == 5 and not any(d.exists() for d in directories)


# --- generation perplexity ------------------------------------------------------------------


def small_encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(EncoderConfig(vocab_size=20, n_layer=2, n_embd=16, n_head=2, n_inner=32, max_position=16,
                                 dropout=0.0, pad_token_id=0)).eval()


def random_blocks(n: int, length: int) -> torch.Tensor:
    blocks = torch.randint(4, 20, (n, length), generator=torch.Generator().manual_seed(1))
    blocks[:, 0], blocks[:, -1] = SPECIALS.cls, SPECIALS.sep
    return blocks


@pytest.mark.parametrize("rows", [1, 10, 25, 1000])
def test_batched_causal_nll_is_the_all_at_once_nll_reading_bounded_batches(rows):
    encoder, blocks = small_encoder(), random_blocks(9, 12)  # 10 body tokens a block
    at_once = causal_nll(encoder, blocks)
    seen = sequences_seen(encoder)
    torch.testing.assert_close(batched_causal_nll(encoder, blocks, rows), at_once, rtol=1e-5, atol=1e-6)
    per_call = max(1, rows // 10)
    assert seen == [per_call] * (9 // per_call) + ([9 % per_call] if 9 % per_call else [])
    assert all(n <= rows and n * 10 <= max(rows, 10) for n in seen)  # sequences, predicted tokens


@pytest.mark.parametrize("objective_name", ["ar", "mlm"])
@pytest.mark.parametrize("rows", [7, 25])
def test_generation_perplexity_reads_at_most_rows_sequences_a_call(objective_name, rows):
    encoder, blocks = small_encoder(), random_blocks(9, 12)
    objective = build_objective({"modality": "text", "objective": objective_name, "knobs": {}}, encoder, SPECIALS)
    at_once = (causal_nll(encoder, blocks) if objective_name == "ar"
               else masked_nll(encoder, blocks, SPECIALS.mask, rows=blocks.numel())).double()
    seen = sequences_seen(encoder)
    found = generation_perplexity(objective, blocks, rows)
    assert seen and max(seen) <= rows
    assert found["nll_nats"] == pytest.approx(at_once.mean().item(), rel=1e-6)
    assert found["generation_perplexity"] == pytest.approx(math.exp(at_once.mean().item()), rel=1e-6)
    assert found["nll_std"] == pytest.approx(at_once.std().item(), rel=1e-5)
    assert found["block_nll"] == pytest.approx(at_once.mean(dim=1).tolist(), rel=1e-6) and found["tokens"] == 90
