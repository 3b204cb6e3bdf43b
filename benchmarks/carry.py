"""Download the wheels the lent GPU machine lacks (benchmarks/carried.txt) into one folder that
travels with the tree (`carry`), and print its size.

    python benchmarks/carry.py .whl                        # for the lent machine: CPython 3.12, x86-64
    python benchmarks/carry.py /tmp/twin-wheels --python-version 3.11   # for the CPU twin here

Only binary wheels, without their dependencies (the list names every one), for manylinux
x86-64; pip needs the registry for this, the install on the machine does not
(gpu_suite.py --wheels). The folder must stay under LIMIT_MIB: the tree and everything
carried travel in 64 MiB.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIST = Path(__file__).resolve().parent / "carried.txt"
LIMIT_MIB = 40
# pip matches a manylinux tag exactly: every glibc level a wheel of the list may be built for
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "manylinux_2_5_x86_64"]


def requirements(listed: Path = LIST) -> list[str]:
    return [line.split("#")[0].strip() for line in listed.read_text().splitlines() if line.split("#")[0].strip()]


def download(dest: Path, python_version: str, wanted: list[str] | None = None) -> float:
    """The `wanted` wheels (default: the list's) in `dest` (only those: a wheel left from another
    list is removed); their MiB."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = requirements() if wanted is None else wanted
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--implementation", "cp", *platforms, "-d", str(dest), *wanted],
                   check=True)
    names = {r.split("==")[0].lower().replace("-", "_") for r in wanted}
    for wheel in dest.glob("*.whl"):
        if wheel.name.split("-")[0].lower() not in names:
            wheel.unlink()
    return sum(w.stat().st_size for w in dest.glob("*.whl")) / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the folder (in the checkout: .whl, which .gitignore leaves out)")
    parser.add_argument("--python-version", default="3.12", help="the machine's Python (default: the lent GPU's)")
    args = parser.parse_args()
    size = download(args.dest, args.python_version)
    print(f"{args.dest}: {len(list(args.dest.glob('*.whl')))} wheels, {size:.1f} MiB")
    if size > LIMIT_MIB:
        raise SystemExit(f"{args.dest} is {size:.1f} MiB, over the {LIMIT_MIB} MiB the lease leaves for it")


if __name__ == "__main__":
    main()
