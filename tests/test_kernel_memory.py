"""``forget_kernels``: the per-kernel tables the analyses keep across runs, emptied.

Benchmarks call it between repeated runs on one module so that a run costs what a first
run on a new kernel does; the tables hold only what can be learnt again, so forgetting
them changes no output.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from tilewave.analysis import footprint, integer_exprs, shared_buffers
from tilewave.examples_builtin import block_sum
from tilewave.ir import walker
from tilewave.kernel_memory import forget_kernels, kernel_table, node_fact
from tilewave.targets import get_target
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers


def test_a_kernel_table_is_emptied_and_stays_registered() -> None:
    table = kernel_table()
    table["node"] = 1
    forget_kernels()
    assert table == {}
    table["again"] = 2
    forget_kernels()
    assert table == {}


def test_the_pass_fills_the_tables_and_forgetting_them_changes_no_output() -> None:
    mod = tvm.IRModule({"main": block_sum})
    run_pass = InsertSharedBarriers(get_target("sm_80"))
    forget_kernels()
    first = run_pass(mod)
    tables = [footprint._BY_HANDLES, footprint._INTERNED, shared_buffers._SHARED_VARS]
    assert all(tables), "a pass run remembers footprints and shared variables"
    assert integer_exprs._ANALYSABLE, "and which index expressions the prover can read"
    forget_kernels()
    assert not any(tables) and not integer_exprs._ANALYSABLE
    assert not walker._WALKED_ONCE and not walker._INDEXES
    tvm.ir.assert_structural_equal(run_pass(mod), first)


def test_a_node_fact_is_computed_once_per_node_and_keeps_its_node() -> None:
    table: dict[int, tuple[Any, Any]] = kernel_table()
    asked: list[Any] = []

    def compute(node: Any) -> str:
        asked.append(node)
        return f"fact {len(asked)}"

    x = tirx.Var("x", "int32")
    expr = x + 1
    assert node_fact(table, expr, compute, 8) == "fact 1"
    assert node_fact(table, expr, compute, 8) == "fact 1"  # remembered: not asked again
    other = x + 1  # equal structure, another node: its own fact
    assert node_fact(table, other, compute, 8) == "fact 2"
    assert table[hash(expr)][1].same_as(expr)  # the node is kept with its fact
    for i in range(8):  # a full table is emptied before the next entry
        node_fact(table, x + i + 2, compute, 8)
    assert len(table) < 8
    forget_kernels()
    assert table == {}
