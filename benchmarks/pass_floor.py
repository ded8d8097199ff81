"""What InsertSharedBarriers would cost if every pair question were free: its floor.

The pass spends its time in two kinds of work: answering whether two shared accesses may
race (``may_conflict``: interval screens, cached proofs, index enumeration) and everything
else (walking the kernel, collecting accesses, the pending-state bookkeeping, loop fixed
points, rebuilding the body). A faster proof engine (a compiled one, say) can only remove
the first. This script measures how much is left without it: each kernel is run once with
``may_conflict`` recorded, then timed (best of ``--repeat``) twice in the same process:

* **pass**: as users run it;
* **floor**: the recorded answers handed back in order instead of asking (the pass is
  deterministic, so it asks the same questions in the same order: the script checks the
  count and that the output is structurally the same as the real run's).

The floor is not a time tilewave reaches; it bounds what any speed-up of the pair proofs
alone can give. Where the floor is above a target (50 ms on the real kernels, 0.5 s at
5,000 statements, 2 s at 20,000), proofs alone cannot meet it.

Run: ``python benchmarks/pass_floor.py [--repeat 5] [--sizes 5000 20000]``
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tvm_ffi

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # this checkout's tilewave

import pass_scaling
import pass_time
from barrier_count import sync_input

from tilewave.errors import TilewaveError
from tilewave.targets import get_target

#: the pass's module (its name is also a function exported by ``tilewave.transforms``)
_PASS_MODULE = importlib.import_module("tilewave.transforms.insert_shared_barriers")


class ReplayMismatch(RuntimeError):
    """A replayed run did not ask the recorded questions (another count or output)."""


@contextmanager
def _may_conflict_replaced(replacement: Callable[..., bool]) -> Iterator[None]:
    original = _PASS_MODULE.may_conflict
    _PASS_MODULE.may_conflict = replacement
    try:
        yield
    finally:
        _PASS_MODULE.may_conflict = original


def _run(mod: Any, target: str, repeat: int = 1) -> tuple[float, Any]:
    """Best CPU time of the pass on ``mod`` over ``repeat`` runs, and its output."""
    info = get_target(target)
    return pass_scaling.timed(lambda: _PASS_MODULE.InsertSharedBarriers(info), mod, repeat)


def recorded_answers(mod: Any, target: str) -> tuple[list[bool], Any]:
    """The ``may_conflict`` verdicts of one pass run, in the order asked, and its output."""
    original = _PASS_MODULE.may_conflict
    answers: list[bool] = []

    def record(*args: Any, **kwargs: Any) -> bool:
        verdict = bool(original(*args, **kwargs))
        answers.append(verdict)
        return verdict

    with _may_conflict_replaced(record):
        _, expected = _run(mod, target)
    return answers, expected


def replayed_time(mod: Any, target: str, answers: list[bool], expected: Any) -> float:
    """CPU time of one pass run answering its pair questions from ``answers`` in order.

    Raises:
        ReplayMismatch: the run asked another number of questions than ``answers`` holds,
            or its output differs from ``expected`` (the recorded run's).
    """
    position = 0

    def replay(*_args: Any, **_kwargs: Any) -> bool:
        nonlocal position
        position += 1
        if position > len(answers):
            raise ReplayMismatch(f"replay asked more than the {len(answers)} recorded questions")
        return answers[position - 1]

    try:
        with _may_conflict_replaced(replay):
            seconds, out = _run(mod, target)
    except (RuntimeError, TilewaveError) as err:
        # (an error raised under the pass comes back through TVM's FFI as a RuntimeError;
        # the recorded run raised none, so the answers made this one fail)
        raise ReplayMismatch(
            f"the replayed run failed: the answers do not belong to it ({err})"
        ) from err
    if position != len(answers) or not tvm_ffi.structural_equal(out, expected):
        raise ReplayMismatch(
            f"replay asked {position} questions, the recorded run {len(answers)}, or produced "
            "another output: the answers do not belong to this run"
        )
    return seconds


def pass_and_floor(mod: Any, target: str, repeat: int) -> tuple[float, float, int]:
    """Best pass time, best time with recorded verdicts replayed, and the question count."""
    answers, expected = recorded_answers(mod, target)
    real = _run(mod, target, repeat)[0]
    floor = min(replayed_time(mod, target, answers, expected) for _ in range(repeat))
    return real, floor, len(answers)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=[5000, 20000])
    parser.add_argument("--only", default="")
    args = parser.parse_args(argv)
    cases: list[tuple[str, Any, str, float]] = []
    for name, (func, target) in pass_time.real_kernels().items():
        if args.only in name:
            cases.append((name, sync_input(func, target), target, pass_time.PASS_TARGET_S))
    targets = {5000: 0.5, 20000: 2.0}
    for size in args.sizes:
        source = pass_scaling.kernel_source(size)
        mod = sync_input(pass_scaling.parse(source), pass_scaling.TARGET)
        cases.append((f"scaling {size}", mod, pass_scaling.TARGET, targets.get(size, 0.0)))
    print("| kernel | questions | pass ms | floor ms | floor / pass | target ms | floor under |")
    print("|---|---|---|---|---|---|---|")
    for name, mod, target, goal in cases:
        real, floor, questions = pass_and_floor(mod, target, args.repeat)
        under = "-" if not goal else ("yes" if floor <= goal else "no")
        print(
            f"| {name} | {questions} | {real * 1e3:.0f} | {floor * 1e3:.0f} | "
            f"{floor / real:.2f} | {goal * 1e3:.0f} | {under} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
