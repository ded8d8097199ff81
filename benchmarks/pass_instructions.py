"""InsertSharedBarriers' instruction counts on the real kernels, for two checkouts side by side.

CPU time on a shared 2-core machine moves 5-10% between runs of the same code (sometimes
1.5x), which hides the few-percent steps the pass-time work is made of. Instructions
executed do not move that way: each kernel's pass runs under valgrind's callgrind with
instrumentation on only around the pass (a first run on the kernel, as in
``pass_time.py``: :func:`tilewave.kernel_memory.forget_kernels` first), and the table gives
each checkout's count in millions and the ratio (repeated runs of one checkout agree to
about 1%: dictionary order and hashing differ between processes). Instructions are a proxy
for time, not time: memory stalls and page faults are not counted; ``pass_time.py`` gives
the times the targets are about, on this machine about 5.3 G instructions a second.

Needs ``valgrind`` (with its ``callgrind.h`` header) and a C compiler; prints why and exits
when they are missing. Each checkout runs in its own process, with its tree first on
``PYTHONPATH``; two checkouts run at once (instruction counts do not depend on load).

Run: ``python benchmarks/pass_instructions.py --base DIR [--new DIR] [--only SUBSTRING]
[--scale 5000]`` (``--new`` defaults to this checkout).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_CONTROL_SOURCE = """
#include <valgrind/callgrind.h>
void tw_count_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void tw_count_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""
# runs in the checkout's own process: counts one first run of the pass per kernel named
_CHILD = """
import ctypes, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/benchmarks"]  # (this checkout's tilewave)
import pass_scaling, pass_time
from barrier_count import sync_input
from tilewave.kernel_memory import forget_kernels
from tilewave.targets import get_target
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers
control = ctypes.CDLL(sys.argv[2])
for name in sys.argv[3:]:
    if name.startswith("scale"):
        source = pass_scaling.kernel_source(int(name[5:]))
        func, target = pass_scaling.parse(source), pass_scaling.TARGET
    else:
        func, target = pass_time.real_kernels()[name]
    mod, info = sync_input(func, target), get_target(target)
    InsertSharedBarriers(info)(mod)  # (imports, compiled cores: not the pass's own work)
    forget_kernels()
    control.tw_count_start()
    InsertSharedBarriers(info)(mod)
    control.tw_count_stop()
"""


def _control_library(workdir: Path) -> Path | None:
    """The start/stop shim for callgrind's client requests, compiled; None (with the reason
    printed) when valgrind or a compiler is missing."""
    if shutil.which("valgrind") is None:
        print("pass_instructions: valgrind is not installed (apt-get install valgrind)")
        return None
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("pass_instructions: no C compiler (apt-get install gcc)")
        return None
    source, library = workdir / "control.c", workdir / "libcontrol.so"
    source.write_text(_CONTROL_SOURCE)
    built = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        print(f"pass_instructions: cannot build the callgrind shim:\n{built.stderr}")
        return None
    return library


def _start(tree: Path, library: Path, names: list[str], out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no",
        f"--callgrind-out-file={out}", sys.executable, "-c", _CHILD,
        str(tree), str(library), *names,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _counts(out: Path, runs: int) -> list[int]:
    """The instruction totals of the dumps ``out.1`` ... ``out.<runs>``, in order."""
    counts = []
    for part in range(1, runs + 1):
        text = Path(f"{out}.{part}").read_text()
        totals = [line.split()[1] for line in text.splitlines() if line.startswith("totals:")]
        counts.append(int(totals[0]))
    return counts


def main(argv: list[str] | None = None) -> int:
    """Print the table; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the reference checkout")
    parser.add_argument("--new", type=Path, default=REPO, help="the checkout compared")
    parser.add_argument("--only", default="", help="kernels whose name holds this")
    parser.add_argument("--scale", type=int, nargs="*", default=[], help="scaling sizes")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "benchmarks"))
    from pass_time import real_kernels

    names = [name for name in real_kernels() if args.only in name]
    names += [f"scale{n}" for n in args.scale]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        library = _control_library(workdir)
        if library is None:
            return 1
        trees = {"base": args.base.resolve(), "new": args.new.resolve()}
        running = {
            label: _start(tree, library, names, workdir / label) for label, tree in trees.items()
        }
        for label, process in running.items():
            _, err = process.communicate()
            if process.returncode != 0:
                print(f"pass_instructions: the {label} run failed:\n{err.decode()[-2000:]}")
                return 1
        counts = {label: _counts(workdir / label, len(names)) for label in trees}
    print("| kernel | base M instructions | new M instructions | base / new |")
    print("|---|---|---|---|")
    for at, name in enumerate(names):
        base, new = counts["base"][at], counts["new"][at]
        print(f"| {name} | {base / 1e6:.1f} | {new / 1e6:.1f} | {base / new:.3f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
