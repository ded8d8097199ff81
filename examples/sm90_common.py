"""What the two sm_90a GEMM examples share: stripping hand synchronisation, launch facts.

``examples/sm90_tma_wgmma_gemm.py`` and ``examples/sm90_ws_gemm.py`` each build a
hand-synchronised kernel (``hand``) and derive the input of tilewave's synchronisation
passes from it (``stripped``) with :func:`strip_sync`. :class:`Sm90Launch` and
:class:`TensorMapSpec` describe how the GPU side launches a kernel whose parameters are
``const __grid_constant__ CUtensorMap`` tensor maps (``benchmarks/real_kernels_sm90.py``).

Needs TVM only inside :func:`strip_sync`; importing this module does not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Ops :func:`strip_sync` removes: block barriers, named barriers (``bar.sync`` /
#: ``bar.arrive`` with an id and a thread count), ``fence.proxy.async`` and
#: ``fence.mbarrier_init``. mbarrier init / arrive / expect_tx / try_wait, TMA copies and
#: the wgmma / bulk-store async groups stay: they are the kernel's dataflow.
STRIPPED_OPS = frozenset(
    {
        "tirx.tvm_storage_sync",
        "tirx.cuda.cta_sync",
        "tirx.cuda.warpgroup_sync",
        "tirx.ptx.bar_sync",
        "tirx.ptx.bar_sync_count",
        "tirx.ptx.bar_arrive",
        "tirx.ptx.barrier_sync",
        "tirx.ptx.barrier_sync_count",
        "tirx.ptx.barrier_arrive",
        "tirx.ptx.fence_proxy",
        "tirx.ptx.fence_mbarrier_init",
    }
)

#: CUtensorMapSwizzle values by name (cuda.h)
SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}


def strip_sync(func: Any, ops: frozenset[str] = STRIPPED_OPS) -> Any:
    """``func`` without the statements calling one of ``ops`` (by default every barrier and
    fence, :data:`STRIPPED_OPS`); needs TVM.

    Raises:
        ValueError: ``func`` has none of them (nothing to strip means a wrong input).
    """
    from tvm import ir, tirx

    from tilewave.ir.walker import TIRMutator

    removed: list[str] = []

    class _Strip(TIRMutator):
        def visit_Evaluate(self, node: Any) -> Any:
            call = node.value
            if isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op):
                if call.op.name in ops:
                    removed.append(call.op.name)
                    return None
            return node

    body = _Strip().visit(func.body)
    if not removed:
        raise ValueError("strip_sync: the kernel has no barrier or fence to strip")
    if body is None:
        body = tirx.Evaluate(0)
    return func.with_body(body)


@dataclass(frozen=True)
class TensorMapSpec:
    """One ``CUtensorMap`` kernel parameter: a 2-D row-major fp16 tensor and its TMA box.

    Attributes:
        param: the kernel parameter's name.
        tensor: which operand it maps (``"A"``, ``"B"`` or ``"C"``).
        rows, cols: the global tensor's shape (row-major; ``cols`` is contiguous).
        box_rows, box_cols: the box one TMA copy moves.
        swizzle: a key of :data:`SWIZZLE`.
    """

    param: str
    tensor: str
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle: str = "128B"


@dataclass(frozen=True)
class Sm90Launch:
    """How the GPU side launches one GEMM ``C = A @ B.T`` (A: m x k, B: n x k, C: m x n).

    Attributes:
        kernel: the ``__global__`` function's name in the generated CUDA.
        grid, block: launch shape.
        tensor_maps: the kernel's parameters, in order.
        m, n, k: problem size.
    """

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    tensor_maps: tuple[TensorMapSpec, ...]
    m: int
    n: int
    k: int

    @property
    def flops(self) -> float:
        """Floating-point operations of one launch."""
        return 2.0 * self.m * self.n * self.k

    def to_json(self) -> dict[str, Any]:
        """The launch as plain JSON data (what the manifest stores)."""
        return asdict(self)


def gemm_tensor_maps(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int,
                     store_cols: int) -> tuple[TensorMapSpec, ...]:
    """The three 128B-swizzled tensor maps of a GEMM kernel ``(A_map, B_map, C_map)``.

    A and B boxes are ``block_m x block_k`` / ``block_n x block_k`` (block_k fp16 = 128 B,
    one swizzle row); C is stored in ``block_m x store_cols`` boxes.
    """
    return (
        TensorMapSpec("A_map", "A", m, k, block_m, block_k),
        TensorMapSpec("B_map", "B", n, k, block_n, block_k),
        TensorMapSpec("C_map", "C", m, n, block_m, store_cols),
    )
