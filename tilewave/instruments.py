"""Debugging switches as ``tvm.instrument`` pass instruments: IR dumps, timings, overrides.

Three instruments, usable with any ``tvm.transform.PassContext(instruments=[...])``:

* :class:`DumpIR` writes the module after every stage, to a stream or to one file per stage
  (``NN-<pass name>.py``, ``00-input.py`` for the input);
* :class:`PassTimings` prints a per-stage wall-time table when the context exits;
* :class:`OverrideIR` replaces a stage's output with a user-edited file of the same name.

A *stage* is a pass run directly by a ``Sequential`` (or on its own); passes that a pass runs
internally (``SplitHostDevice`` runs ``ConvertSSA``) are not stages, so dump names are stable.
:func:`instruments_from_env` builds the instruments the ``TILEWAVE_*`` environment variables
ask for; :func:`tilewave.lower` and :func:`tilewave.build` use it by default.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import tvm
from tvm.script import ir as I
from tvm.script import tirx as T

from tilewave.errors import DebugOptionError

__all__ = [
    "ENV_DUMP_DIR",
    "ENV_DUMP_IR",
    "ENV_OVERRIDE_DIR",
    "ENV_TIMING",
    "ENV_VERIFY_BARRIERS",
    "DumpIR",
    "OverrideIR",
    "PassTimings",
    "instruments_from_env",
    "stage_file_name",
    "verify_barriers_from_env",
]

ENV_DUMP_IR = "TILEWAVE_DUMP_IR"
ENV_DUMP_DIR = "TILEWAVE_DUMP_DIR"
ENV_TIMING = "TILEWAVE_TIMING"
ENV_OVERRIDE_DIR = "TILEWAVE_OVERRIDE_DIR"
ENV_VERIFY_BARRIERS = "TILEWAVE_VERIFY_BARRIERS"

# Names of the Sequentials whose children are stages (TVM's default name and tilewave's own).
_SEQUENCE_NAMES = frozenset({"sequential", "tilewave.lower", "tilewave.device"})
_FALSE_WORDS = frozenset({"", "0", "false", "no", "off"})
_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


def stage_file_name(index: int, pass_name: str) -> str:
    """The dump / override file name of stage ``index``: ``"07-tirx.FlattenBuffer.py"``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pass_name)
    return f"{index:02d}-{safe}.py"


@dataclass
class _StageTracker:
    """Numbers the stages of one PassContext; tells stages from passes nested in a pass."""

    count: int = 0
    stack: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.count = 0
        self.stack.clear()

    def before(self, name: str) -> bool:
        """Record entry into pass ``name``; True if it is a stage."""
        is_stage = name not in _SEQUENCE_NAMES and all(n in _SEQUENCE_NAMES for n in self.stack)
        self.stack.append(name)
        return is_stage

    def after(self) -> int | None:
        """Record exit from the innermost pass; its stage number if it was a stage."""
        name = self.stack.pop() if self.stack else ""
        if name in _SEQUENCE_NAMES or any(n not in _SEQUENCE_NAMES for n in self.stack):
            return None
        self.count += 1
        return self.count


def _module_text(mod: tvm.IRModule) -> str:
    return mod.script()


def _mentions(mod: tvm.IRModule, func_filter: str | None) -> bool:
    if func_filter is None:
        return True
    return any(func_filter in gvar.name_hint for gvar in mod.get_global_vars())


@tvm.instrument.pass_instrument
class DumpIR:
    """Dump the IRModule (TVMScript) before the first stage and after every stage.

    Args:
        directory: write one file per stage there (``00-input.py``, ``01-<pass>.py``...);
            ``None`` writes to ``stream`` with a header line per stage.
        stream: where to write when ``directory`` is ``None`` (default ``sys.stderr``).
        func_filter: only dump modules with a function whose name contains this text.

    Raises:
        DebugOptionError: the directory cannot be created or written.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        stream: TextIO | None = None,
        func_filter: str | None = None,
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.stream = stream
        self.func_filter = func_filter
        self._tracker = _StageTracker()
        if self.directory is not None:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise DebugOptionError(
                    f"DumpIR: cannot create the dump directory {str(self.directory)!r}: "
                    f"{err.strerror}. Point {ENV_DUMP_DIR} / --dump-ir at a writable directory."
                ) from None

    def enter_pass_ctx(self) -> None:
        """Start numbering stages from 1 for a new PassContext."""
        self._tracker.reset()

    def run_before_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Dump the input before the first stage."""
        if self._tracker.before(info.name) and self._tracker.count == 0:
            self._emit(mod, "00-input.py", "input")

    def run_after_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Dump the module a stage produced."""
        index = self._tracker.after()
        if index is not None:
            self._emit(mod, stage_file_name(index, info.name), f"after {info.name}")

    def _emit(self, mod: tvm.IRModule, file_name: str, title: str) -> None:
        if not _mentions(mod, self.func_filter):
            return
        text = _module_text(mod)
        if self.directory is None:
            stream = self.stream or sys.stderr
            stream.write(f"# ===== tilewave IR dump: {file_name} ({title}) =====\n{text}\n")
            return
        path = self.directory / file_name
        try:
            path.write_text(text)
        except OSError as err:
            raise DebugOptionError(
                f"DumpIR: cannot write {str(path)!r}: {err.strerror}. Point {ENV_DUMP_DIR} / "
                "--dump-ir at a writable directory."
            ) from None


@tvm.instrument.pass_instrument
class PassTimings:
    """Print a per-stage wall-time table when the PassContext exits.

    Args:
        stream: where to print (default ``sys.stderr``).

    The recorded rows stay available as :attr:`rows` (``(stage file name, seconds)``).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.rows: list[tuple[str, float]] = []
        self._tracker = _StageTracker()
        self._starts: list[float] = []

    def enter_pass_ctx(self) -> None:
        """Clear the table for a new PassContext."""
        self._tracker.reset()
        self.rows = []
        self._starts = []

    def run_before_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Start the clock of a pass."""
        self._tracker.before(info.name)
        self._starts.append(time.perf_counter())

    def run_after_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Stop the clock of a pass; keep it if it is a stage."""
        elapsed = time.perf_counter() - self._starts.pop()
        index = self._tracker.after()
        if index is not None:
            self.rows.append((stage_file_name(index, info.name)[:-3], elapsed))

    def exit_pass_ctx(self) -> None:
        """Print the table."""
        if self.rows:
            (self.stream or sys.stderr).write(self.table())

    def table(self) -> str:
        """The timing table as text: one row per stage, then the total."""
        total = sum(seconds for _, seconds in self.rows) or 1e-12
        width = max(len(name) for name, _ in self.rows)
        lines = [f"{'stage':<{width}}  {'ms':>9}  {'share':>6}"]
        for name, seconds in self.rows:
            lines.append(f"{name:<{width}}  {seconds * 1e3:9.3f}  {seconds / total:6.1%}")
        lines.append(f"{'total':<{width}}  {total * 1e3:9.3f}  {1:6.1%}")
        return "# tilewave pass timings\n" + "\n".join(lines) + "\n"


def _parse_override(path: Path) -> tvm.IRModule:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise DebugOptionError(
            f"OverrideIR: cannot read the override file {str(path)!r}: {err}. Fix its "
            "permissions/encoding or remove it from the override directory."
        ) from None
    try:
        parsed = tvm.script.from_source(text, extra_vars={"T": T, "I": I})
    except Exception as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DebugOptionError(
            f"OverrideIR: the override file {str(path)!r} is not a valid TVMScript module "
            f"({first_line}). Start from the file tilewave dumped for this stage and edit it."
        ) from None
    if isinstance(parsed, tvm.tirx.PrimFunc):
        parsed = tvm.IRModule({"main": parsed})
    if not isinstance(parsed, tvm.IRModule):
        raise DebugOptionError(
            f"OverrideIR: the override file {str(path)!r} defines a {type(parsed).__name__}, "
            "not an IRModule. Start from the file tilewave dumped for this stage."
        )
    return parsed


def _replace_in_place(mod: tvm.IRModule, new: tvm.IRModule) -> None:
    # A pass instrument cannot return a module; the Sequential goes on with the object the
    # stage returned, so that object's contents are swapped.
    for gvar in mod.get_global_vars():
        del mod[gvar]
    mod.update(new)


@tvm.instrument.pass_instrument
class OverrideIR:
    """Replace a stage's output with ``<directory>/<NN-pass name>.py`` when that file exists.

    The file name is the one :class:`DumpIR` gives the stage: dump once, copy the stage
    you want to change into the override directory, edit it, run again.

    Args:
        directory: the override directory.

    Raises:
        DebugOptionError: the directory does not exist, or an override file cannot be read
            or parsed.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise DebugOptionError(
                f"OverrideIR: the override directory {str(self.directory)!r} does not exist. "
                f"Create it, or unset {ENV_OVERRIDE_DIR}."
            )
        self.applied: list[str] = []
        self._tracker = _StageTracker()

    def enter_pass_ctx(self) -> None:
        """Start numbering stages from 1 for a new PassContext."""
        self._tracker.reset()
        self.applied = []

    def run_before_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Track nesting."""
        self._tracker.before(info.name)

    def run_after_pass(self, mod: tvm.IRModule, info: Any) -> None:
        """Swap in the override file of this stage, if there is one."""
        index = self._tracker.after()
        if index is None:
            return
        path = self.directory / stage_file_name(index, info.name)
        if path.is_file():
            _replace_in_place(mod, _parse_override(path))
            self.applied.append(path.name)
            sys.stderr.write(f"# tilewave: stage {path.name} overridden from {path}\n")


def _env_words(name: str) -> str:
    return os.environ.get(name, "").strip()


def verify_barriers_from_env() -> bool:
    """Whether ``TILEWAVE_VERIFY_BARRIERS`` asks for the barrier stage's output check
    (``1``/``true``/``yes``/``on``; unset, empty, ``0``/``false``/``no``/``off``: no).

    Raises:
        DebugOptionError: any other value.
    """
    word = _env_words(ENV_VERIFY_BARRIERS).lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise DebugOptionError(
        f"{ENV_VERIFY_BARRIERS}={os.environ[ENV_VERIFY_BARRIERS]!r} is not a switch: set it "
        "to 1 (check the barrier stage's output for hazards) or 0 / leave it unset (do not)."
    )


def instruments_from_env() -> list[Any]:
    """The instruments the ``TILEWAVE_*`` environment variables ask for (possibly none).

    * ``TILEWAVE_OVERRIDE_DIR=dir``: :class:`OverrideIR` from ``dir``.
    * ``TILEWAVE_DUMP_IR=1`` (or a function name, to dump only modules with that function):
      :class:`DumpIR` to stderr, or to ``TILEWAVE_DUMP_DIR`` when that is set (setting
      ``TILEWAVE_DUMP_DIR`` alone also turns dumping on).
    * ``TILEWAVE_TIMING=1``: :class:`PassTimings` to stderr.
    """
    chosen: list[Any] = []
    override_dir = _env_words(ENV_OVERRIDE_DIR)
    if override_dir:
        chosen.append(OverrideIR(override_dir))
    dump = _env_words(ENV_DUMP_IR)
    dump_dir = _env_words(ENV_DUMP_DIR) or None
    if dump.lower() not in _FALSE_WORDS or dump_dir is not None:
        func_filter = None if dump.lower() in _TRUE_WORDS | _FALSE_WORDS else dump
        chosen.append(DumpIR(directory=dump_dir, func_filter=func_filter))
    if _env_words(ENV_TIMING).lower() not in _FALSE_WORDS:
        chosen.append(PassTimings())
    return chosen
