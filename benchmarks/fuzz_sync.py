"""The synchronisation fuzz property at scale: >= 5000 random kernels through tilewave.lower.

Same generator and property as tests/test_fuzz_sync.py (tests/fuzz_sync_kernels.py): for
every kernel and target (sm_90a, gfx1200) ``tilewave.lower`` finishes or raises a
TilewaveError; the barrier stage's output verifies clean and is idempotent; where TVM's own
``ThreadSync`` gives a race-free reference, tilewave's lowered kernel gives the same result
under every interpreted thread order. A property failure stops the run with hypothesis's
shrunk counterexample. The table counts the outcomes; "compared" rows are the kernels whose
results were checked against the reference measured in the same run.

Run: ``python benchmarks/fuzz_sync.py [--kernels 5000] [--seed 0]``
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzz_sync_kernels import TARGETS, Outcome, check_kernel, kernels
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tilewave.tvm_log import quiet_device_probe_warnings


def _label(outcome: Outcome) -> str:
    if outcome.error:
        return f"refused: {outcome.error}"
    if outcome.compared:
        return "lowered, result = ThreadSync reference"
    if outcome.reference_failed:
        return "lowered, TVM ThreadSync fails (sync under an if)"
    if outcome.reference_racy:
        return "lowered, reference racy (not compared)"
    return "lowered, split halves apart (not compared)"


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz property on ``--kernels`` kernels and print the outcome table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    @seed(args.seed)
    @settings(
        max_examples=args.kernels,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(source=kernels(), target=st.sampled_from(TARGETS))
    def run(source: str, target: str) -> None:
        outcome = check_kernel(source, target)
        counts[(target, _label(outcome))] += 1
        if outcome.verifier_overruled:
            counts[(target, "(of the lowered: verifier report, racecheck clean)")] += 1

    start = time.perf_counter()
    with warnings.catch_warnings(), quiet_device_probe_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy int32 arithmetic on fill values
        run()
    seconds = time.perf_counter() - start
    total = sum(n for (_, label), n in counts.items() if not label.startswith("("))
    width = max(len(label) for _, label in counts)
    print(f"# fuzz_sync: {total} kernels, seed {args.seed}, {seconds:.0f} s, property held")
    print(f"{'target':<8}  {'outcome':<{width}}  {'kernels':>7}  {'share':>6}")
    for (target, label), n in sorted(counts.items()):
        print(f"{target:<8}  {label:<{width}}  {n:7d}  {n / total:6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
