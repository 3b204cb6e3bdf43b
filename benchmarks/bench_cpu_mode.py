"""What the reproducible CPU mode costs: pretraining tokens/s of the maskbench MLM (params.yaml's
`pretrain` size, micro-batch and sequence length, fp32, forward + backward + AdamW, its `threads`)
with `cpu_arithmetic: native` and `reproducible`.

The libraries read the mode's pins once, when they start, so each measurement is a fresh
process (`--worker MODE`); the two modes alternate, `--rounds` times each, so both see the same
machine load, and the ratio is of their medians.

    python benchmarks/bench_cpu_mode.py        # writes benchmarks/results/cpu_mode.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

VOCAB = 8192


def worker(mode: str, steps: int) -> None:
    """In this process: put `mode` in force, then time `steps` training steps (after 3 warm-up
    steps) and print the median step's tokens/s, as JSON with what held."""
    from maskbench import cpu_mode

    status = cpu_mode.apply(mode)
    import torch

    from maskbench.config import load_params
    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.registry import MaskedLM, SpecialTokens

    params = load_params()["pretrain"]
    size = load_params()["model_sizes"][params["model"]]
    torch.set_num_threads(params["threads"])
    torch.manual_seed(0)
    batch = torch.randint(5, VOCAB, (params["micro_batch_size"], params["seq_len"]))
    objective = MaskedLM(Encoder(EncoderConfig(vocab_size=VOCAB, max_position=params["seq_len"], **size)),
                         SpecialTokens(pad=0, cls=2, sep=3, mask=4))
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-4)
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        objective(batch, objective.draw(batch, torch.Generator().manual_seed(i))).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    print(json.dumps({"mode": status, "capability": torch.backends.cpu.get_cpu_capability(),
                      "tokens_per_s": batch.numel() / statistics.median(times[3:])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["native", "reproducible"], help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process (after 3 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per mode, alternating")
    parser.add_argument("--out", default="benchmarks/results/cpu_mode.json")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.steps)

    from maskbench.provenance import arithmetic

    runs = {"native": [], "reproducible": []}
    for _ in range(args.rounds):
        for mode in runs:
            out = subprocess.run([sys.executable, __file__, "--worker", mode, "--steps", str(args.steps)],
                                 capture_output=True, text=True, check=True).stdout
            runs[mode].append(json.loads(out.splitlines()[-1]))
    rates = {mode: statistics.median(r["tokens_per_s"] for r in found) for mode, found in runs.items()}
    result = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": arithmetic(),
              "runs": runs, "tokens_per_s": rates,
              "ratio_reproducible_over_native": rates["reproducible"] / rates["native"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
