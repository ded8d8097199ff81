"""tilewave's own ops: registered once, with attributes, printable and re-parseable."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import tvm
from tvm import ir, tirx

from tilewave.ir import ops
from tilewave.ir.intrinsics import OpEffect, classify

sys.path.insert(0, str(Path(__file__).parent))
from ops_kernels import uses_every_tilewave_op


def test_every_op_is_registered_with_an_opaque_effect_and_arity():
    names = set(ir.Op.list_op_names())
    for spec in ops.TILEWAVE_OPS:
        assert spec.name in names
        op = ir.Op.get(spec.name)
        assert int(op.get_attr("TCallEffectKind")) == 4
        assert op.num_inputs == spec.num_inputs
        assert classify(spec.name) is not None


def test_registration_is_idempotent_on_reimport():
    importlib.reload(ops)
    assert ir.Op.list_op_names().count("tilewave.lds_barrier") == 1


def test_ops_print_and_reparse(tmp_path):
    text = uses_every_tilewave_op.script()
    for spec in ops.TILEWAVE_OPS:
        assert f"T.{spec.name}(" in text
    module_file = tmp_path / "reparsed_kernel.py"
    module_file.write_text("import tilewave\nfrom tvm.script import tirx as T\n\n" + text)
    sys.path.insert(0, str(tmp_path))
    try:
        reparsed = importlib.import_module("reparsed_kernel")
    finally:
        sys.path.remove(str(tmp_path))
    func = next(v for v in vars(reparsed).values() if isinstance(v, tirx.PrimFunc))
    tvm.ir.assert_structural_equal(func, uses_every_tilewave_op)


def test_call_op_builds_the_same_statement_the_parser_builds():
    seq = uses_every_tilewave_op.body.body.seq
    tvm.ir.assert_structural_equal(ops.call_op("tilewave.barrier_signal", 0), seq[5])
    tvm.ir.assert_structural_equal(ops.call_op("tilewave.lds_barrier"), seq[4])


def test_op_table_knows_what_each_tilewave_op_does():
    assert classify("tilewave.lds_barrier") == OpEffect.BARRIER
    assert classify("tilewave.wait_async_ops") == OpEffect.ASYNC_WAIT
    assert classify("tilewave.fence_proxy_async") == OpEffect.FENCE_PROXY
    assert textwrap.dedent(ops.__doc__ or "").strip()
