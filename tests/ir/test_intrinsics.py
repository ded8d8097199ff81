"""The op table: built-in classification, user extension, and its errors."""

from __future__ import annotations

import pytest
from tvm import ir, tirx

from tilewave import OpEffect, register_intrinsic, unregister_intrinsic
from tilewave.errors import IntrinsicRegistrationError, UnclassifiedOpError
from tilewave.ir.intrinsics import (
    callee_name,
    classify,
    classify_call,
    intrinsic_table,
    require_classification,
)

E = OpEffect


@pytest.mark.parametrize(
    ("name", "must_have", "must_not_have"),
    [
        ("tirx.ptx.ldmatrix", E.GENERIC_SHARED | E.READS_SHARED, E.ASYNC_PROXY),
        ("tirx.ptx.stmatrix", E.GENERIC_SHARED | E.WRITES_SHARED, E.ASYNC_PROXY),
        ("tirx.ptx.cp_async_ca", E.GENERIC_SHARED | E.ASYNC_COPY | E.WRITES_SHARED, E.ASYNC_PROXY),
        ("tirx.ptx.cp_async_cg_src_size", E.GENERIC_SHARED | E.ASYNC_COPY, E.ASYNC_PROXY),
        ("tirx.ptx.wgmma_f16_ss", E.ASYNC_PROXY | E.READS_SHARED, E.GENERIC_SHARED),
        ("tirx.ptx.wgmma_bf16_rs", E.ASYNC_PROXY, E.GENERIC_SHARED),
        ("tirx.ptx.cp_async_bulk_tensor_g2s_cta", E.ASYNC_PROXY | E.ASYNC_COPY, E.GENERIC_SHARED),
        ("tirx.ptx.cp_async_bulk_tensor_s2g", E.ASYNC_PROXY | E.READS_SHARED, E.ASYNC_COPY),
        ("tirx.ptx.cp_async_bulk_s2g", E.ASYNC_PROXY | E.READS_SHARED, E.ASYNC_COPY),
        ("tirx.ptx.tcgen05_mma_ss", E.ASYNC_PROXY, E.GENERIC_SHARED),
        ("tirx.ptx.fence_proxy", E.FENCE_PROXY, E.BARRIER),
        ("tirx.ptx.bar_sync", E.BARRIER, E.ASYNC_PROXY),
        ("tirx.tvm_storage_sync", E.BARRIER, E.ASYNC_PROXY),
        ("tirx.cuda.cta_sync", E.BARRIER, E.ASYNC_PROXY),
        ("tirx.ptx.mbarrier_try_wait_parity", E.BARRIER | E.ASYNC_WAIT, E.ASYNC_PROXY),
        ("tirx.ptx.cp_async_wait_group", E.ASYNC_WAIT, E.BARRIER),
        ("tirx.ptx.atom_cas", E.ATOMIC, E.BARRIER),
        ("tirx.atomic_add", E.ATOMIC, E.BARRIER),
    ],
)
def test_builtin_classification(name, must_have, must_not_have):
    assert name in ir.Op.list_op_names(), f"{name} is not an op of this TVM"
    effect = classify(name)
    assert effect is not None
    assert effect & must_have == must_have
    assert not effect & must_not_have


def test_group_bookkeeping_ops_are_neutral_not_async():
    for name in ("tirx.ptx.wgmma_fence", "tirx.ptx.wgmma_commit_group",
                 "tirx.ptx.cp_async_commit_group", "tirx.ptx.cp_async_bulk_commit_group",
                 "tirx.ptx.mbarrier_init", "tirx.ptx.redux_sync"):
        assert classify(name) == E.NONE, name


def test_pure_tvm_ops_are_neutral_and_unknown_names_are_none():
    assert classify("tirx.exp") == E.NONE
    assert classify("tirx.buffer_data") == E.NONE
    assert classify("my_library_function") is None
    assert classify("tirx.call_extern") is None


def test_every_row_of_the_table_names_an_op_or_a_user_registration():
    rows = intrinsic_table()
    names = set(ir.Op.list_op_names())
    assert len(rows) > 100
    assert all(r.name in names or r.source == "user" for r in rows)
    assert any(r.name == "tirx.ptx.fence_proxy" and r.source == "exact" for r in rows)


def test_register_intrinsic_classifies_extern_calls_by_callee():
    call = tirx.call_extern("void", "my_tma_load", tirx.IntImm("int32", 0))
    assert callee_name(call) == "my_tma_load"
    assert classify_call(call) is None
    register_intrinsic("my_tma_load", ["async", "async_copy", "writes_shared"])
    try:
        effect = classify_call(call)
        assert effect == E.ASYNC_PROXY | E.ASYNC_COPY | E.WRITES_SHARED
        assert any(r.name == "my_tma_load" for r in intrinsic_table())
    finally:
        unregister_intrinsic("my_tma_load")
    assert classify_call(call) is None


def test_user_registration_overrides_the_builtin_table():
    register_intrinsic("tirx.ptx.ldmatrix", "none")
    try:
        assert classify("tirx.ptx.ldmatrix") == E.NONE
    finally:
        unregister_intrinsic("tirx.ptx.ldmatrix")
    assert classify("tirx.ptx.ldmatrix") & E.GENERIC_SHARED


def test_a_statement_is_classified_again_after_the_op_table_changes():
    """``sync_action`` remembers its answer per statement; registering (and removing) an
    op must not leave the old answer in place for a statement already asked about."""
    from tilewave.analysis.shared_access import SyncKind, sync_action

    stmt = tirx.Evaluate(tirx.call_extern("void", "my_block_sync"))
    assert sync_action(stmt) is None  # unknown op: remembered as no synchronisation
    register_intrinsic("my_block_sync", "barrier")
    try:
        action = sync_action(stmt)
        assert action is not None and action.kind is SyncKind.BARRIER
    finally:
        unregister_intrinsic("my_block_sync")
    assert sync_action(stmt) is None


def test_register_intrinsic_rejects_unknown_kind():
    with pytest.raises(IntrinsicRegistrationError, match=r"unknown kind 'asynchronous'.*'async'"):
        register_intrinsic("foo_op", "asynchronous")


def test_register_intrinsic_rejects_empty_name():
    with pytest.raises(IntrinsicRegistrationError, match="non-empty string"):
        register_intrinsic("", "generic")


def test_register_intrinsic_refuses_silent_redefinition():
    register_intrinsic("foo_twice", "generic")
    try:
        register_intrinsic("foo_twice", "generic")  # same meaning: accepted
        with pytest.raises(IntrinsicRegistrationError, match=r"already registered.*override=True"):
            register_intrinsic("foo_twice", "async")
        register_intrinsic("foo_twice", "async", override=True)
        assert classify("foo_twice") == E.ASYNC_PROXY
    finally:
        unregister_intrinsic("foo_twice")


def test_require_classification_names_op_function_and_fix():
    call = tirx.call_extern("void", "mystery_op", tirx.IntImm("int32", 1))
    with pytest.raises(UnclassifiedOpError) as info:
        require_classification(call, "my_kernel", "InsertSharedBarriers")
    message = str(info.value)
    assert "InsertSharedBarriers" in message
    assert "'mystery_op'" in message
    assert "in function 'my_kernel'" in message
    assert "tilewave.register_intrinsic('mystery_op'" in message


def test_a_call_to_another_function_is_named_and_refused_not_a_crash():
    callee = ir.GlobalVar("helper_fn")
    call = ir.expr.Call(callee, [tirx.IntImm("int32", 0)], ret_ty="void")
    assert callee_name(call) == "helper_fn"
    assert classify_call(call) is None
    with pytest.raises(UnclassifiedOpError, match="cannot tell what op 'helper_fn' does"):
        require_classification(call, "kernel", "InsertSharedBarriers")
