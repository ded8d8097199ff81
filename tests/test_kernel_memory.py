"""``forget_kernels``: the per-kernel tables the analyses keep across runs, emptied.

Benchmarks call it between repeated runs on one module so that a run costs what a first
run on a new kernel does; the tables hold only what can be learnt again, so forgetting
them changes no output.
"""

from __future__ import annotations

import tvm

from tilewave.analysis import footprint, integer_exprs, shared_buffers
from tilewave.examples_builtin import block_sum
from tilewave.ir import walker
from tilewave.kernel_memory import forget_kernels, kernel_table
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
