"""AccessScope equality and hashing: scopes built binding by binding equal the same scope
built at once, with equal hashes (the placer's tables find scopes by value)."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given
from tvm import tirx

from tilewave.analysis.access_model import AccessScope

_VARS = [tirx.Var(f"v{i}", "int32") for i in range(4)]
_VALUES = [tirx.IntImm("int32", i) for i in range(3)] + [_VARS[0] + 1]
_COND = _VARS[1] < 4

_bindings = st.lists(
    st.tuples(st.sampled_from(_VARS), st.sampled_from(_VALUES)), max_size=6
)


def _chained(bindings: list[tuple[tirx.Var, object]], conditioned: bool) -> AccessScope:
    scope = AccessScope()
    for at, (var, value) in enumerate(bindings):
        scope = scope.binding(var, value)
        if conditioned and at == 0:
            scope = scope.assuming(_COND)  # (a derived scope in the middle of the chain)
    if conditioned and not bindings:
        scope = scope.assuming(_COND)
    return scope


@given(_bindings, _bindings, st.booleans(), st.booleans())
def test_equal_bindings_give_equal_scopes_and_hashes(first, second, cond_a, cond_b):
    a = _chained(first, cond_a)
    b = _chained(second, cond_b)
    at_once = AccessScope((), a.conditions, tuple(first))
    same = [(hash(v), hash(x)) for v, x in first] == [(hash(v), hash(x)) for v, x in second]
    assert (a == b) == (same and cond_a == cond_b)
    if a == b:
        assert hash(a) == hash(b)
    assert a == at_once
    assert hash(a) == hash(at_once)


def test_a_scope_with_one_more_binding_is_another_scope():
    base = AccessScope().binding(_VARS[0], _VALUES[0])
    longer = base.binding(_VARS[1], _VALUES[1])
    assert base != longer
    assert base == AccessScope().binding(_VARS[0], _VALUES[0])
    assert {base: 1}.get(AccessScope((), (), ((_VARS[0], _VALUES[0]),))) == 1
