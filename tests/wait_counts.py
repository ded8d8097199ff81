"""Test helper: a kernel with its ``wait_async_ops`` counts rewritten."""

import tvm

from tilewave.ir.ops import make_call
from tilewave.ir.walker import rewrite_calls


def with_wait(func, count: int):
    """``func`` with every ``wait_async_ops`` waiting for ``count``."""

    def rewrite(call):
        if call.op.name == "tilewave.wait_async_ops":
            return make_call("tilewave.wait_async_ops", tvm.tirx.IntImm("int32", count))
        return None

    return func.with_body(rewrite_calls(func.body, rewrite))
