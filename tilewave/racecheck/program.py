"""Flatten a PrimFunc body into a list of instructions with explicit jumps.

Every thread of a block then has a program counter into one list, so threads that take
different branches, spin in different loop iterations or wait at different barriers are
just threads at different program counters; the scheduler runs the threads that share one
program counter together, vectorised over NumPy arrays.

Loops become ``assign``/``branch``/``jump`` sequences (the trip bound is evaluated once, at
loop entry, like the generated code does); thread-binding loops and ``thread_extent``
attributes become ``bind`` instructions that give the loop variable each thread's index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tvm import ir, tirx

from tilewave.errors import MalformedKernelError, where

__all__ = ["Instr", "Launch", "Program", "compile_program"]

_LOOP_EXITS = {"tirx.break_loop": 0, "tirx.continue_loop": 1}


@dataclass
class Instr:
    """One instruction.

    Attributes:
        kind: ``"exec"`` (a leaf statement), ``"assign"`` (``var = expr``), ``"branch"``
            (continue when ``expr`` holds, else go to ``target``), ``"jump"``, ``"bind"``
            (``var`` = the thread's or block's index along ``tag``), ``"end"``.
        stmt: the TIR statement it came from (for reports).
        var, expr, target, tag: the operands of the kinds above.
    """

    kind: str
    stmt: Any = None
    var: Any = None
    expr: Any = None
    target: int = -1
    tag: str = ""


@dataclass
class Launch:
    """The launch shape the kernel binds: thread and block extents by axis tag."""

    threads: dict[str, int] = field(default_factory=dict)
    blocks: dict[str, int] = field(default_factory=dict)

    @property
    def num_threads(self) -> int:
        """Threads per block."""
        total = 1
        for extent in self.threads.values():
            total *= extent
        return total

    @property
    def num_blocks(self) -> int:
        """Blocks in the grid."""
        total = 1
        for extent in self.blocks.values():
            total *= extent
        return total


@dataclass
class Program:
    """A flattened PrimFunc: its instructions and launch shape."""

    name: str
    instrs: list[Instr]
    launch: Launch


class _Compiler:
    def __init__(self, name: str) -> None:
        self.name = name
        self.instrs: list[Instr] = []
        self.launch = Launch()
        self.loops: list[tuple[list[int], list[int]]] = []  # (break jumps, continue jumps)

    def emit(self, instr: Instr) -> int:
        self.instrs.append(instr)
        return len(self.instrs) - 1

    def stmt(self, node: Any) -> None:
        kind = type(node).__name__
        handler = getattr(self, "s_" + kind, None)
        if handler is None:
            raise MalformedKernelError(
                f"racecheck: cannot execute a {kind} statement {where(self.name, node)}; "
                "racecheck runs lowered TIR (loops, ifs, stores, calls). Lower the kernel "
                "first (tilewave.lower) or rewrite the statement."
            )
        handler(node)

    def s_SeqStmt(self, node: tirx.SeqStmt) -> None:
        for item in node.seq:
            self.stmt(item)

    def _leaf(self, node: Any) -> None:
        self.emit(Instr("exec", stmt=node))

    s_BufferStore = _leaf

    def s_Evaluate(self, node: tirx.Evaluate) -> None:
        call = node.value
        name = call.op.name if isinstance(call, ir.expr.Call) and isinstance(call.op, ir.Op) else ""
        if name in _LOOP_EXITS:  # TVM's lowered `break` / `continue`
            self._loop_exit(node, _LOOP_EXITS[name])
        else:
            self._leaf(node)

    s_AllocBuffer = _leaf
    s_DeclBuffer = _leaf
    s_AssertStmt = _leaf

    def s_Bind(self, node: Any) -> None:
        self.emit(Instr("assign", stmt=node, var=node.var, expr=node.value))

    def s_LetStmt(self, node: Any) -> None:
        self.emit(Instr("assign", stmt=node, var=node.var, expr=node.value))
        self.stmt(node.body)

    def s_AttrStmt(self, node: tirx.AttrStmt) -> None:
        if node.attr_key == "thread_extent":
            self._bind(node, str(node.node.thread_tag), node.node.var, node.value)
        self.stmt(node.body)

    def _bind(self, node: Any, tag: str, var: Any, extent: Any) -> None:
        if not isinstance(extent, tirx.IntImm):
            raise MalformedKernelError(
                f"racecheck: {tag} has the non-constant extent {extent} {where(self.name)}; "
                "racecheck runs a fixed launch shape. Bind the axis with a constant extent."
            )
        table = self.launch.threads if tag.startswith("threadIdx") else self.launch.blocks
        table[tag] = int(extent.value)
        self.emit(Instr("bind", stmt=node, var=var, tag=tag))

    def s_For(self, node: tirx.For) -> None:
        if node.kind == tirx.ForKind.THREAD_BINDING:
            tag = str(node.thread_binding.thread_tag)
            self._bind(node, tag, node.loop_var, node.extent)
            self.stmt(node.body)
            return
        var = node.loop_var
        end = tirx.Var(var.name + "_end", str(var.ty))
        step = node.step if getattr(node, "step", None) is not None else tirx.const(1, str(var.ty))
        self.emit(Instr("assign", stmt=node, var=end, expr=node.min + node.extent))
        self.emit(Instr("assign", stmt=node, var=var, expr=node.min))
        head = self.emit(Instr("branch", stmt=node, expr=tirx.LT(var, end)))
        self.loops.append(([], []))
        self.stmt(node.body)
        breaks, continues = self.loops.pop()
        latch = self.emit(Instr("assign", stmt=node, var=var, expr=var + step))
        self.emit(Instr("jump", stmt=node, target=head))
        self._patch(continues, latch)
        self._patch([*breaks, head], len(self.instrs))

    def s_While(self, node: tirx.While) -> None:
        head = self.emit(Instr("branch", stmt=node, expr=node.condition))
        self.loops.append(([], []))
        self.stmt(node.body)
        breaks, continues = self.loops.pop()
        self.emit(Instr("jump", stmt=node, target=head))
        self._patch(continues, head)
        self._patch([*breaks, head], len(self.instrs))

    def s_IfThenElse(self, node: tirx.IfThenElse) -> None:
        branch = self.emit(Instr("branch", stmt=node, expr=node.condition))
        self.stmt(node.then_case)
        if node.else_case is not None:
            skip = self.emit(Instr("jump", stmt=node))
            self.instrs[branch].target = len(self.instrs)
            self.stmt(node.else_case)
            self.instrs[skip].target = len(self.instrs)
        else:
            self.instrs[branch].target = len(self.instrs)

    def s_Break(self, node: Any) -> None:
        self._loop_exit(node, 0)

    def s_Continue(self, node: Any) -> None:
        self._loop_exit(node, 1)

    def _loop_exit(self, node: Any, which: int) -> None:
        if not self.loops:
            raise MalformedKernelError(
                f"racecheck: {type(node).__name__} outside a loop {where(self.name, node)}."
            )
        self.loops[-1][which].append(self.emit(Instr("jump", stmt=node)))

    def _patch(self, jumps: list[int], target: int) -> None:
        for index in jumps:
            self.instrs[index].target = target


def compile_program(func: tirx.PrimFunc, name: str) -> Program:
    """Flatten ``func``'s body.

    Raises:
        MalformedKernelError: a statement kind racecheck cannot execute, or a thread axis
            with a non-constant extent.
    """
    compiler = _Compiler(name)
    compiler.stmt(func.body)
    compiler.emit(Instr("end"))
    if not compiler.launch.threads:
        raise MalformedKernelError(
            f"racecheck: {where(name)} binds no threadIdx axis; racecheck runs the threads of "
            "a GPU block. Bind one with T.thread_binding(n, thread='threadIdx.x')."
        )
    return Program(name, compiler.instrs, compiler.launch)


def is_call(node: Any) -> bool:
    """Whether ``node`` is a ``Call`` expression."""
    return isinstance(node, ir.expr.Call)
