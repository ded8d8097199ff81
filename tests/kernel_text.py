"""Kernels written as TVMScript text in tests: parse one and take a node out of it."""

from __future__ import annotations

from typing import Any

from tvm.script import from_source
from tvm.script import tirx as T

from tilewave.ir.walker import post_order_visit


def first_node(source: str, node_class: type) -> Any:
    """The first node of ``node_class`` (in post order) of the kernel ``source`` (a
    ``@T.prim_func`` written with ``T``)."""
    func = from_source(source, extra_vars={"T": T})
    found: list[Any] = []
    post_order_visit(func.body, found.append, (node_class,))
    return found[0]
