"""What a real-kernel example gives ``benchmarks/real_kernels_h100.py``: a family of variants.

A *family* is one kernel (one problem: a GEMM, an attention forward...) and the ways of
building it into CUDA C: the hand-synchronised reference and the variants tilewave
synchronises. An example module exposes ``bench_families(small: bool) -> list[KernelFamily]``
(``small``: a problem size for ``compute-sanitizer --tool racecheck``); the benchmark lists
the modules it imports in ``FAMILY_MODULES``.

Only :func:`strip_sync`, :func:`standard_variants`' builders and :func:`build_hand` need TVM
and tilewave; the dataclasses import without them (the GPU side of the benchmark reads only
the manifest).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

#: TVM pass that shrinks a tile reached only through ``T.address_of`` (tilewave issue 10);
#: the hand-synchronised references are built without it.
COMPACT_PASS = "s_tir.CompactBufferAllocation"
#: tilewave's barrier stage (left out when the kernel's sync is placed by hand)
BARRIER_PASS = "tilewave.InsertSharedBarriers"

Role = Literal["hand", "tilewave"]


@dataclass(frozen=True)
class BenchVariant:
    """One way of turning a kernel into CUDA C.

    Attributes:
        name: the row label (``"hand"``, ``"stripped+tilewave"``, ``"plain+tilewave N=3"``).
        role: ``"hand"`` for the hand-synchronised reference, ``"tilewave"`` for variants
            whose synchronisation tilewave decides (judged: must be correct, race-free).
        build: returns the CUDA C source; may raise (the benchmark then shows the error).
        note: how the variant is built, one line.
    """

    name: str
    role: Role
    build: Callable[[], str]
    note: str = ""


@dataclass(frozen=True)
class KernelFamily:
    """One kernel and its variants, with what the GPU side needs to launch and check it.

    Attributes:
        name: the family's id (``"sm80_gemm"``).
        problem: the GPU side's problem description; ``problem["kind"]`` selects the input
            maker and torch reference in the benchmark (``"gemm_nt"``, ``"attention"``).
        grid, block: launch shape.
        flops: floating-point operations of one launch (for TFLOP/s).
        variants: the variants, the hand reference first.
        dynamic_smem: dynamic shared memory bytes per block (0 when all of it is static).
    """

    name: str
    problem: dict[str, Any]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    flops: float
    variants: tuple[BenchVariant, ...]
    dynamic_smem: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def strip_sync(func: Any) -> Any:
    """``func`` without any synchronisation statement: barriers (full, split, named waits),
    ``cp.async.wait_group`` / ``wait_all`` and ``cp.async.commit_group``; needs TVM.

    A statement counts as synchronisation when tilewave's
    :func:`tilewave.analysis.shared_access.sync_action` says it is one.
    """
    from tilewave.analysis.shared_access import sync_action
    from tilewave.ir.walker import TIRMutator

    class _Strip(TIRMutator):
        def visit_Evaluate(self, node: Any) -> Any:
            return None if sync_action(node) is not None else node

    return func.with_body(_Strip().visit(func.body))


def build_hand(func: Any, target: str = "sm_90a") -> str:
    """CUDA C of a hand-synchronised kernel: tilewave's pass list with its barrier stage and
    TVM's ``CompactBufferAllocation`` left out, so the source has exactly the hand's sync."""
    import tvm

    from tilewave.pipeline import build

    with tvm.transform.PassContext(disabled_pass=[BARRIER_PASS, COMPACT_PASS]):
        return build(func, target).source


def build_tilewave(func: Any, target: str = "sm_90a", count: int | None = None) -> str:
    """CUDA C from tilewave's default pass list (``multi_buffer_count=count``)."""
    from tilewave.pipeline import build

    return build(func, target, multi_buffer_count=count).source


def standard_variants(
    hand: Callable[[], Any], plain: Callable[[], Any], counts: tuple[int, ...] = (1, 2, 3)
) -> tuple[BenchVariant, ...]:
    """The variants of issue 10 for a kernel given as its hand-synchronised and its plain
    (single-stage, unsynchronised) form.

    ``hand`` (reference), ``hand+tilewave`` (the hand kernel through tilewave's full list: the
    pass must keep correct sync as it is), ``stripped+tilewave`` and
    ``plain+tilewave N=<count>`` for each count.
    """

    def stripped() -> Any:
        return strip_sync(hand())

    variants = [
        BenchVariant("hand", "hand", lambda: build_hand(hand()), "hand sync; no barrier pass"),
        BenchVariant(
            "hand+tilewave",
            "tilewave",
            lambda: build_tilewave(hand()),
            "hand kernel through tilewave.build (sync pass must be idempotent)",
        ),
        BenchVariant(
            "stripped+tilewave",
            "tilewave",
            lambda: build_tilewave(stripped()),
            "every barrier/wait/commit removed, tilewave.build re-synchronises",
        ),
    ]
    for count in counts:
        variants.append(
            BenchVariant(
                f"plain+tilewave N={count}",
                "tilewave",
                lambda count=count: build_tilewave(plain(), count=None if count == 1 else count),
                "single-stage loop, tilewave.build"
                + ("" if count == 1 else f"(multi_buffer_count={count})"),
            )
        )
    return tuple(variants)
