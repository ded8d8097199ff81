"""Shared-buffer facts: scope tests and address-taking calls."""

from __future__ import annotations

from tvm import tirx

from tilewave.analysis.shared_buffers import (
    addresses_dynamic_shared,
    buffer_scope,
    is_buffer,
    is_shared_buffer,
    shared_buffers_addressed,
)

S = tirx.decl_buffer((64,), "float32", "S", scope="shared")
D = tirx.decl_buffer((64,), "float32", "D", scope="shared.dyn")
L = tirx.decl_buffer((4,), "float32", "L", scope="local")
G = tirx.decl_buffer((64,), "float32", "G")
I0 = tirx.IntImm("int32", 0)


def test_scopes():
    assert is_shared_buffer(S) and is_shared_buffer(D)
    assert not is_shared_buffer(L) and not is_shared_buffer(G)
    assert buffer_scope(L) == "local"
    assert not is_buffer(tirx.Var("x", "int32"))
    assert buffer_scope(tirx.Var("x", "int32")) is None


def test_address_taking_forms_are_found():
    data = tirx.call_intrin("handle", "tirx.buffer_data", S)
    assert [b.name for b in shared_buffers_addressed(tirx.call_extern("void", "f", data))] == [
        "S"
    ]
    address = tirx.call_intrin("handle", "tirx.address_of", tirx.BufferLoad(D, [I0]))
    assert [b.name for b in shared_buffers_addressed(address)] == ["D"]
    access = tirx.call_intrin(
        "handle", "tirx.tvm_access_ptr", tirx.type_annotation("float32"),
        tirx.call_intrin("handle", "tirx.buffer_data", S), I0, tirx.IntImm("int32", 64), 2,
    )  # fmt: skip
    assert [b.name for b in shared_buffers_addressed(access)] == ["S"]


def test_plain_loads_and_non_shared_addresses_are_not_reported():
    assert shared_buffers_addressed(tirx.BufferLoad(S, [I0]) + 1) == []
    local_data = tirx.call_intrin("handle", "tirx.buffer_data", L)
    assert shared_buffers_addressed(tirx.call_extern("void", "f", local_data)) == []


def test_each_buffer_reported_once_in_first_seen_order():
    call = tirx.call_extern(
        "void", "f",
        tirx.call_intrin("handle", "tirx.buffer_data", D),
        tirx.call_intrin("handle", "tirx.buffer_data", S),
        tirx.call_intrin("handle", "tirx.buffer_data", D),
    )  # fmt: skip
    assert [b.name for b in shared_buffers_addressed(call)] == ["D", "S"]


def _evaluate(*args):
    return tirx.Evaluate(tirx.call_extern("void", "f", *args))


def test_a_statement_addressing_a_dynamic_shared_buffer_is_told_apart():
    dyn_address = tirx.call_intrin("handle", "tirx.address_of", tirx.BufferLoad(D, [I0]))
    static_data = tirx.call_intrin("handle", "tirx.buffer_data", S)
    nested = tirx.call_intrin(
        "handle", "tirx.tvm_access_ptr", tirx.type_annotation("float32"), dyn_address, I0,
        tirx.IntImm("int32", 64), 2,
    )  # fmt: skip
    assert addresses_dynamic_shared(tirx.SeqStmt([_evaluate(static_data), _evaluate(nested)]))
    assert not addresses_dynamic_shared(_evaluate(static_data))
    # a plain load of the dynamic buffer takes no address
    assert not addresses_dynamic_shared(_evaluate(tirx.BufferLoad(D, [I0])))
