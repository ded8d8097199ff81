"""The accesses of one leaf statement read each way ``statement_accesses`` can: the
reference the tests of its Python readings (plain stores, op calls) compare against."""

from __future__ import annotations

from typing import Any

import tvm_ffi

from tilewave.analysis.shared_access import AccessScope, collected_accesses, statement_accesses

#: a descriptor map of a kernel with wgmma (here: none of its entries is read)
DESCRIPTORS: dict[Any, list[Any]] = {"no wgmma": []}


def described(accesses: list[Any]) -> list[tuple[Any, ...]]:
    """What an access list says, comparable between readings: per access its buffer,
    kind, indices (structurally), loop ranges, async domain, collectiveness and mbarrier
    role, in order."""
    return [
        (
            hash(a.buffer),
            a.kind,
            None if a.indices is None else tvm_ffi.StructuralKey(list(a.indices)),
            tuple((lp.min, lp.extent) for lp in a.loops),
            a.async_domain,
            a.collective,
            a.mbarrier_access,
        )
        for a in accesses
    ]


def three_readings(stmt: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """:func:`described` of ``stmt``'s accesses read by ``statement_accesses`` without and
    with a wgmma descriptor map, and by the collector (``collected_accesses``)."""
    return (
        described(statement_accesses(stmt, AccessScope())),
        described(statement_accesses(stmt, AccessScope(), descriptors=DESCRIPTORS)),
        described(collected_accesses(stmt, AccessScope())),
    )
