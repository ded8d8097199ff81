"""Filter TVM's C++ log lines about device probes a machine without that device cannot answer.

TVM's ROCm target and codegen ask the ROCm runtime for its version and the block-size limit;
without ROCm they log a warning and assume ROCm >= 3.5 and 256 threads per block. tilewave
generates ROCm code on machines without ROCm on purpose, so the command line drops exactly
those lines (TVM writes them to file descriptor 2 from C++, out of Python's reach, hence the
descriptor-level capture). Every other line comes through unchanged, after the block.
The 256-thread assumption is checked separately: :func:`tilewave.build` refuses ROCm kernels
with larger blocks (see :func:`tilewave.pipeline.check_rocm_block_size`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["DEVICE_PROBE_WARNINGS", "quiet_device_probe_warnings"]

#: TVM log lines that only say "no ROCm device here to ask".
DEVICE_PROBE_WARNINGS = re.compile(
    r"Warning: (Unable to detect ROCm version, assuming >= 3\.5"
    r"|Cannot get maximum number of threads for AMD codegen)\s*$"
)


@contextlib.contextmanager
def quiet_device_probe_warnings() -> Iterator[None]:
    """Run the block with fd 2 captured; re-emit every line but :data:`DEVICE_PROBE_WARNINGS`.

    Python output to ``sys.stderr`` inside the block is held back too and written after it,
    in order. Nesting is harmless (the inner block's output passes through the outer one).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = [
                line for line in text.splitlines(keepends=True)
                if not DEVICE_PROBE_WARNINGS.search(line)
            ]  # fmt: skip
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
