"""tilewave's passes: each a pure ``PrimFunc -> PrimFunc`` function plus a ``tvm.transform.Pass``.

Every pass composes in a user's ``tvm.transform.Sequential``.
"""

from tilewave.transforms.inject_fence_proxy import InjectFenceProxy, inject_fence_proxy
from tilewave.transforms.insert_shared_barriers import InsertSharedBarriers, insert_shared_barriers
from tilewave.transforms.multibuffer import MultiBuffer, multi_buffer

__all__ = [
    "InjectFenceProxy",
    "InsertSharedBarriers",
    "MultiBuffer",
    "inject_fence_proxy",
    "insert_shared_barriers",
    "multi_buffer",
]
