"""Run one `maskbench` command in this process and record when its optimizer steps happen, and
optionally a torch profiler summary of a few of its steps: what the GPU suite's CLI parts
(benchmarks/gpu_parts.py d, e, h) measure a job by, from outside the training loops.

    python benchmarks/cli_timing.py --record steps.json -- finetune --run mlm --task t --seed 1
    python benchmarks/cli_timing.py --record steps.json --profile 10,2,3 -- pretrain --run exlm

A global optimizer step hook (torch.optim.optimizer.register_optimizer_step_post_hook) stamps
every step's wall-clock time (time.time(), so the caller, on the same machine, can subtract the
moment it started the process: a job's start-up is the time to its first step). With
`--profile WAIT,WARMUP,ACTIVE` the profiler skips WAIT steps, warms up over WARMUP and records
ACTIVE steps; the record keeps its top kernels by device time (operators by CPU time on a CPU)
as a table of a few rows, not the trace, which would not come back from a lease. The record is
written (atomically) as soon as the window closes, so a job stopped later keeps it, and again
when the command ends, whatever its exit status, which it keeps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

TOP_ROWS = 15  # the profile's rows kept: the kernels that decide a step's time


def profile_table(profiler, on_cuda: bool, steps: int) -> dict:
    """The profiled steps' top TOP_ROWS entries per step with each one's share of the total: on
    a GPU its kernels (and copies) by device time, the events the device ran (an operator's own
    device time is its kernels', so counting both would count twice, as torch's own table does
    not); on a CPU its operators by self CPU time."""
    from torch.autograd import DeviceType

    events = profiler.key_averages()
    if on_cuda:
        own, what = (lambda e: e.self_device_time_total), "kernels by device time"
        pool = [e for e in events if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    else:
        own, what = (lambda e: e.self_cpu_time_total), "operators by self CPU time"
        pool = [e for e in events if not e.key.startswith("ProfilerStep")]
    total_us = sum(own(e) for e in pool)
    rows = sorted(pool, key=own, reverse=True)[:TOP_ROWS]
    return {"sorted_by": what, "steps": steps, "total_ms_per_step": round(total_us / 1e3 / steps, 3),
            "rows": [{"name": e.key[:120], "calls_per_step": round(e.count / steps, 2),
                      "self_ms_per_step": round(own(e) / 1e3 / steps, 3),
                      "share": round(own(e) / total_us, 4) if total_us else None} for e in rows]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True,
                        help="the JSON record, written when the profile's window closes and when the command ends")
    parser.add_argument("--profile", help="WAIT,WARMUP,ACTIVE: profile ACTIVE steps after WAIT + WARMUP")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the maskbench command's arguments")
    args = parser.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = time.time()

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from maskbench.cli import main as maskbench
    from maskbench.io import write_json

    stamps: list[float] = []
    record = {"argv": argv, "wrapper_started": started, "step_times": stamps}

    def save(**fields) -> None:
        record.update(fields, steps=len(stamps))
        write_json(args.record, record)

    profiler, window = None, {}
    if args.profile:
        window = dict(zip(("wait", "warmup", "active"), (int(x) for x in args.profile.split(","))))
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)

        def ready(done) -> None:  # the window closed (or the command ended inside it: not a whole window)
            if len(stamps) >= sum(window.values()):  # kept at once: the job may be stopped before it ends
                save(profile=profile_table(done, torch.cuda.is_available(), window["active"]) | {"window": window})
        profiler = torch.profiler.profile(activities=activities, on_trace_ready=ready,
                                          schedule=torch.profiler.schedule(**window, repeat=1))
        profiler.start()

    def stamp(optimizer, *_):
        stamps.append(time.time())
        if profiler is not None:
            profiler.step()  # one window (repeat=1), which closes after its last active step
    hook = register_optimizer_step_post_hook(stamp)

    status = 0
    try:
        maskbench(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        hook.remove()
        if profiler is not None:
            profiler.stop()
            record.setdefault("profile", f"not recorded: the command took {len(stamps)} steps, the window needs "
                                         f"{sum(window.values())}")
        save(exit_status=status)
    return status

if __name__ == "__main__":
    sys.exit(main())
