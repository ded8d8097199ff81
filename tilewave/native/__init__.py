"""Compiled cores of tilewave's analyses, built from C sources on first use.

A source in this package is compiled once per machine with the system C compiler into a
shared library under tilewave's cache directory (keyed by the source's hash, so an edited
source is rebuilt), then loaded with :mod:`ctypes`. Nothing is compiled at install time;
a machine without a compiler gets ``None`` from :func:`load` and the analyses use their
pure-Python path, which stays the reference the compiled one is tested against.

Environment:

* ``TILEWAVE_NATIVE=0`` turns the compiled cores off (pure-Python paths everywhere);
* ``TILEWAVE_CACHE_DIR`` overrides the cache directory (default
  ``$XDG_CACHE_HOME/tilewave`` or ``~/.cache/tilewave``);
* ``CC`` names the compiler (default ``cc``, then ``gcc``, then ``clang``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import warnings
from functools import cache
from pathlib import Path

__all__ = ["NativeBuildError", "build", "enabled", "load"]

_SOURCES = Path(__file__).resolve().parent
_FLAGS = ("-O3", "-std=c99", "-shared", "-fPIC")


class NativeBuildError(RuntimeError):
    """A compiled core could not be built (no compiler, or the compiler failed)."""


def enabled() -> bool:
    """Whether compiled cores may be used (``TILEWAVE_NATIVE`` is not ``0``)."""
    return os.environ.get("TILEWAVE_NATIVE", "1") != "0"


def _cache_dir() -> Path:
    explicit = os.environ.get("TILEWAVE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tilewave"


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise NativeBuildError("no C compiler found (set CC, or install gcc or clang)")


def build(name: str) -> Path:
    """The shared library of source ``name`` (``points`` for ``points.c``), compiled now
    unless the cache holds one built from the same source with the same flags."""
    source = _SOURCES / f"{name}.c"
    if not source.is_file():
        raise NativeBuildError(f"no C source {source}")
    compiler = _compiler()
    digest = hashlib.sha256(source.read_bytes() + " ".join(_FLAGS).encode()).hexdigest()[:16]
    target = _cache_dir() / f"{name}-{digest}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # a private name, then an atomic rename: concurrent processes never load half a file
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *_FLAGS, "-o", partial, str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise NativeBuildError(f"{compiler} failed on {source}:\n{done.stderr.strip()}")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


@cache
def load(name: str) -> ctypes.CDLL | None:
    """The compiled core ``name`` loaded, or ``None`` when compiled cores are off or it
    cannot be built (a warning then says why, once per process)."""
    if not enabled():
        return None
    try:
        return ctypes.CDLL(str(build(name)))
    except (NativeBuildError, OSError) as err:
        warnings.warn(
            f"tilewave: the compiled core '{name}' is not available ({err}); the slower "
            "pure-Python path is used. Install a C compiler (gcc or clang) to get it, or set "
            "TILEWAVE_NATIVE=0 to silence this.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
