"""What the reproducible CPU mode costs, and what each of its pins costs: tokens/s of a
pretraining step of the maskbench MLM (params.yaml's `pretrain` size, micro-batch and sequence
length, fp32, forward + backward + AdamW, its `threads`) and of a fine-tuning-shaped step (the same
encoder, `finetune`'s batch of short sentences, a classification head on the first position),
under `cpu_arithmetic: native`, `reproducible`, and candidate pin sets (VARIANTS): the
reproducible pins with MKL left on its automatic branch (what the MKL pin costs), and with MKL's
AVX2 branch instead of COMPATIBLE (documented to hold on Intel CPUs only).

The libraries read the pins once, when they start, so each measurement is a fresh process
(`--worker VARIANT`); the variants alternate (A, B, C, A, B, C, ...) `--rounds` times, so all see
the same machine load, and each ratio is of medians over the rounds.

    python benchmarks/bench_cpu_mode.py        # writes benchmarks/results/cpu_mode.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VOCAB = 8192
FINETUNE_TOKENS = 48  # a WikiText-2 sentence in tokens, about; the fine-tuning batch pads to its longest

# variant -> (the mode the worker applies, the pins its process starts with: under `native` they stay)
VARIANTS = {
    "native": ("native", {}),
    "reproducible": ("reproducible", {}),
    "reproducible, MKL automatic": ("native", {"MKL_CBWR": "AUTO"}),
    "reproducible, MKL_CBWR=AVX2": ("native", {"MKL_CBWR": "AVX2"}),
}


def encoder_at_pretrain_size(params: dict):
    """The maskbench encoder at params.yaml's `pretrain` model and sequence length, over a
    VOCAB-token vocabulary, initialised from torch's generator."""
    from maskbench.model.encoder import Encoder, EncoderConfig

    pretrain = params["pretrain"]
    return Encoder(EncoderConfig(vocab_size=VOCAB, max_position=pretrain["seq_len"],
                                 **params["model_sizes"][pretrain["model"]]))


def step_maker(job: str, params: dict):
    """(a function doing one training step, tokens per step) for `job`."""
    import torch

    from maskbench.objectives.registry import MaskedLM, SpecialTokens

    pretrain = params["pretrain"]
    encoder = encoder_at_pretrain_size(params)
    if job == "pretrain":
        batch = torch.randint(5, VOCAB, (pretrain["micro_batch_size"], pretrain["seq_len"]))
        model = MaskedLM(encoder, SpecialTokens(pad=0, cls=2, sep=3, mask=4))

        def loss(i):
            return model(batch, model.draw(batch, torch.Generator().manual_seed(i))).loss
    else:
        batch = torch.randint(5, VOCAB, (params["finetune"]["settings"]["batch_size"], FINETUNE_TOKENS))
        labels = torch.randint(0, 2, (batch.shape[0],))
        head = torch.nn.Linear(encoder.config.n_embd, 2)
        model = torch.nn.ModuleList([encoder, head])

        def loss(i):
            hidden = encoder(batch).last_hidden_state[:, 0]
            return torch.nn.functional.cross_entropy(head(hidden), labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i):
        loss(i).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step, batch.numel()


def worker(variant: str, job: str, steps: int) -> None:
    """In this process: put the variant's mode in force, then time `steps` training steps of `job`
    (after 3 warm-up steps) and print the median step's tokens/s, as JSON with what held."""
    from maskbench import cpu_mode

    status = cpu_mode.apply(VARIANTS[variant][0])
    import torch

    from maskbench.config import load_params

    params = load_params()
    torch.set_num_threads(params["pretrain"]["threads"])
    torch.manual_seed(0)
    step, tokens = step_maker(job, params)
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - start)
    pins = {k: os.environ[k] for k in cpu_mode.PINS if k in os.environ}
    print(json.dumps({"mode": status, "pins": pins, "capability": torch.backends.cpu.get_cpu_capability(),
                      "tokens_per_s": tokens / statistics.median(times[3:])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--job", choices=["pretrain", "finetune"], default="pretrain", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per process (after 3 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant and job, alternating")
    parser.add_argument("--out", default="benchmarks/results/cpu_mode.json")
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.job, args.steps)

    from maskbench import cpu_mode
    from maskbench.provenance import arithmetic

    jobs = ("pretrain", "finetune")
    runs = {job: {variant: [] for variant in VARIANTS} for job in jobs}
    clean = {k: v for k, v in os.environ.items() if k not in cpu_mode.PINS}
    for _ in range(args.rounds):
        for job in jobs:
            for variant, (_, started) in VARIANTS.items():
                env = clean | ({**cpu_mode.PINS, **started} if started else {})
                out = subprocess.run([sys.executable, __file__, "--worker", variant, "--job", job,
                                      "--steps", str(args.steps)], env=env, capture_output=True, text=True,
                                     check=True).stdout
                runs[job][variant].append(json.loads(out.splitlines()[-1]))
    rates = {job: {v: statistics.median(r["tokens_per_s"] for r in found) for v, found in by.items()}
             for job, by in runs.items()}
    result = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": arithmetic(),
              "load_average_after": os.getloadavg(), "runs": runs, "tokens_per_s": rates,
              "native_over_variant": {job: {v: rates[job]["native"] / r for v, r in by.items()}
                                      for job, by in rates.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"tokens_per_s": rates, "native_over_variant": result["native_over_variant"]}, indent=2))


if __name__ == "__main__":
    main()
