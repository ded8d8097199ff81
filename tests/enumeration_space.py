"""A small enumerable space shared by the enumeration tests: a 4096-element shared buffer,
threads ``tx`` (8) and ``ty`` (2), and a serial loop ``k`` of 3 iterations around them."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.shared_access import AccessScope, LoopRange

TRIPS = 3
TX_EXTENT, TY_EXTENT = 8, 2


@T.prim_func
def template(A: T.Buffer((64,), "int32")):
    S = T.alloc_buffer((4096,), "int32", scope="shared")
    for ty in T.thread_binding(TY_EXTENT, thread="threadIdx.y"):
        for tx in T.thread_binding(TX_EXTENT, thread="threadIdx.x"):
            for k in range(TRIPS):
                S[tx + k] = A[tx + ty]


def _parts() -> tuple[Any, Any, Any, Any]:
    node = template.body
    while not (isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING):
        node = node.seq[-1] if isinstance(node, tirx.SeqStmt) else node.body
    ty_loop = node
    tx_loop = ty_loop.body
    serial = tx_loop.body
    return serial.body.buffer, ty_loop.loop_var, tx_loop.loop_var, serial


BUFFER, TY, TX, K_LOOP = _parts()
K = K_LOOP.loop_var
K_RANGE = LoopRange.of(K_LOOP, AccessScope(), [TX, TY])
EXTENTS = {TX: TX_EXTENT, TY: TY_EXTENT}


def arithmetic_indices(children: Any, moduli: Any) -> Any:
    """Index shapes the enumeration and bounds tests share: sums, differences, products
    and xors of ``children``, moduli and divisions by ``moduli``, integer casts."""
    pairs = st.tuples(children, children)
    return (
        st.builds(lambda p: tirx.Add(*p), pairs)
        | st.builds(lambda p: tirx.Sub(*p), pairs)
        | st.builds(lambda p: tirx.Mul(*p), pairs)
        | st.builds(lambda p: tirx.bitwise_xor(*p), pairs)
        | st.builds(tirx.floormod, children, moduli)
        | st.builds(tirx.floordiv, children, moduli)
        | st.builds(lambda c: tirx.Cast("int32", tirx.Cast("int64", c)), children)
    )
