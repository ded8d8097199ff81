"""tilewave: GPU synchronisation and memory-pipelining passes for Apache TVM TIR.

Importing tilewave registers its own TIR ops (``T.tilewave.*``) with TVM, and its pass lists
as TVM TIR pipelines: ``tvm.compile(kernel, target, tir_pipeline="tilewave")`` (see
:mod:`tilewave.tvm_pipelines`).
"""

from tilewave.errors import TilewaveError
from tilewave.ir import OpEffect, register_intrinsic, unregister_intrinsic
from tilewave.pipeline import build, lower
from tilewave.racecheck import racecheck
from tilewave.targets import TargetInfo, get_target
from tilewave.tvm_pipelines import register_pipelines

register_pipelines()

__version__ = "0.1.0"

__all__ = [
    "OpEffect",
    "TargetInfo",
    "TilewaveError",
    "__version__",
    "build",
    "get_target",
    "lower",
    "racecheck",
    "register_intrinsic",
    "unregister_intrinsic",
]
