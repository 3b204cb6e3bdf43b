"""Why an arm stays on the unigram plateau: its first steps, measured (docs/learning-failures.md).

Trains one run of a workflow directory's params.yaml exactly as `maskbench pretrain` does (the
same setup, blocks, masks and optimizer step; no checkpoints, no tracking) and, at the steps
asked for, prints and records:
- `valid_loss`: pretraining's validation loss (nats per masked token, on its blocks: windows or
  documents, as the run's `blocks` says) beside the corpus's unigram loss;
- `centred_norm`: ||H - mean(H)|| / ||H|| of the encoder's final states H over the real tokens
  of the first validation windows (the analyses' blocks), unmasked (what fine-tuning reads): 0 when every token gets one
  shared vector (collapse), about 1 when the states share no common part;
- ExLM only, `own_posterior`, `next_transition` and `dag_nll` (`maskbench.analysis.alignment`):
  the share of a masked token's alignment posterior on its own [MASK]'s states, the transition
  mass from each state to the next expanded token's, and the DAG's loss on its own masks, on the
  same windows with masks drawn as in training (seeded).

    cd <workdir with params.yaml and data/> && PYTHONPATH=<repo>/src python <repo>/benchmarks/learning_failures.py \
        --run smiles_mae_lm --set pretrain.lr=0.002 --set pretrain.output_bias_init=zero --at 0 30 150 --out zero.json

`--set key=value` (a YAML value: write 0.002, not 2e-3, which YAML reads as a string) is merged
into the active profile; `runs.<run>.knobs.<knob>=value` reaches a run's knobs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml

from maskbench.analysis.alignment import alignment
from maskbench.config import read_params, schema_path, validate
from maskbench.data.corpus import load_stream
from maskbench.device import precision
from maskbench.paths import TOKENIZER, TOKENS
from maskbench.train.optim import optimizer_step
from maskbench.train.blocks import block_source
from maskbench.train.pretrain import _step_rngs, setup
from maskbench.train.validation import valid_loss, validation_set, validation_sets


def with_settings(raw: dict, assignments: list[str]) -> dict:
    """`raw` (params.yaml as written) with each `dotted.key=value` set in its active profile, so
    that it is merged last."""
    for assignment in assignments:
        key, value = assignment.split("=", 1)
        *path, leaf = key.split(".")
        node = raw["profiles"].setdefault(raw["profile"], {})
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return raw


@torch.no_grad()
def centred_norm(encoder, blocks: torch.Tensor, special_ids: list[int]) -> float:
    """||H - mean(H)|| / ||H|| over the states of the blocks' real (non-special) tokens."""
    encoder.eval()
    states = encoder(blocks).last_hidden_state
    encoder.train()
    real = ~torch.isin(blocks, torch.tensor(special_ids))
    h = states[real].double()
    return float((h - h.mean(0)).norm() / h.norm())


def measure(state, scored, valid, special_ids: list[int]) -> dict:
    row = {"step": state.step,
           "valid_loss": valid_loss(state.objective, scored, state.settings["micro_batch_size"], state.device,
                                    state.settings["precision"]),
           "centred_norm": centred_norm(state.encoder, valid.blocks, special_ids)}
    if state.objective.name == "exlm":
        state.objective.eval()
        batch = state.settings["micro_batch_size"]
        drawn = [(blocks, state.objective.draw(blocks, torch.Generator().manual_seed(start)))
                 for start in range(0, len(valid.blocks), batch) for blocks in [valid.blocks[start:start + batch]]]
        stats = alignment(state.objective, drawn)
        state.objective.train()
        if stats["applies"]:  # not under `transitions: ctc`, which has no DAG to align through
            row.update({k: stats[k] for k in ("own_posterior", "next_transition", "even_share", "dag_nll")})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--at", type=int, nargs="+", required=True, help="steps to measure at (0: before training)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    raw, _ = read_params("params.yaml")
    config = validate(with_settings(raw, args.set), yaml.safe_load(schema_path().read_text()),
                      every_profile=False)
    modality = config["runs"][args.run]["modality"]
    state = setup(config, args.run, Path(TOKENS.format(modality=modality)), Path(TOKENIZER.format(modality=modality)))
    settings = state.settings
    train = block_source(settings["blocks"], load_stream(Path(TOKENS.format(modality=modality)), "train"),
                         settings["seq_len"], state.specials)
    valid_stream = load_stream(Path(TOKENS.format(modality=modality)), "valid")
    scored = validation_sets(block_source(settings["blocks"], valid_stream, settings["seq_len"], state.specials),
                             settings["eval_blocks"])  # pretraining's validation: its loss is the same number
    valid = validation_set(valid_stream, settings["seq_len"], state.specials, settings["eval_blocks"])
    special_ids = state.tokenizer.all_special_ids
    rows = []
    for step in range(max(args.at) + 1):
        if step in args.at:
            rows.append(measure(state, scored, valid, special_ids))
            print(json.dumps({**rows[-1], "unigram_loss": state.data_meta["unigram_loss"]}), flush=True)
        if step == max(args.at):
            break
        batch_rng, mask_rng = _step_rngs(settings["seed"], state.step, state.device)
        blocks = train.sample(settings["batch_size"], batch_rng)
        draws = state.objective.draw(blocks, mask_rng)
        with precision(state.device, settings["precision"]):
            loss = state.objective(blocks, draws).loss
        loss.backward()
        optimizer_step(state.objective, state.optimizer, state.schedule, settings["clip_norm"])
        state.step += 1
    if args.out:
        args.out.write_text(json.dumps({"run": args.run, "set": args.set,
                                        "unigram_loss": state.data_meta["unigram_loss"],
                                        "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
