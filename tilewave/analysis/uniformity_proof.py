"""Block-uniformity proved a second way, for the hazard verifier.

The barrier pass decides uniformity with :mod:`tilewave.analysis.uniformity` (thread values
enumerated, residues of the uniform part). The verifier must not share that blind spot, so
:class:`UniformityProof` proves the same property differently: a condition ``c`` is
block-uniform when ``c(thread a) == c(thread b)`` is proved for two arbitrary threads
``a``, ``b`` of the block (each thread index renamed for ``b``, both ranges bound) by
``tvm.sym.Analyzer`` (with its SMT extension where the build has it) under the premises
holding at the branch.

Loads are replaced by variables: one variable for both threads when every thread reads the
same word of memory that holds one value for the whole block (indices proved equal the same
way, of a shared buffer — ordered against its writes by barriers —, of a kernel parameter no
statement writes or passes to a call (the memory fact,
:func:`~tilewave.analysis.uniformity.unwritten_global_buffers`, is shared with the pass),
or of a local that ``uniform_local_buffers`` finds equal in every thread); two unrelated
variables otherwise. Premises are ``assert`` and
``T.assume`` statements earlier in an enclosing statement list and the enclosing ``if``
conditions that do not mention a thread index.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from tvm import ir, tirx
from tvm.sym.analyzer import Analyzer, ProofStrength

from tilewave.analysis.shared_access import (
    AccessScope,
    collect_thread_extents,
    nested_statements,
)
from tilewave.analysis.shared_buffers import SHARED_SCOPES, buffer_scope, loads_local_buffer
from tilewave.analysis.uniform_locals import uniform_local_buffers
from tilewave.analysis.uniformity import unwritten_global_buffers
from tilewave.ir.walker import TIRMutator, ffi_list, kind_by_class, post_order_visit, substitute

__all__ = ["UniformityProof"]

#: milliseconds the SMT extension may spend on one proof
_Z3_TIMEOUT_MS = 200


def _stated(stmt: Any) -> Any | None:
    """What an ``assert`` or ``T.assume`` statement states (None for other statements)."""
    if isinstance(stmt, tirx.AssertStmt):
        return stmt.condition
    value = getattr(stmt, "value", None) if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(value, ir.expr.Call) and getattr(value.op, "name", "") == "tirx.assume":
        return value.args[0]
    return None


class _Loads(TIRMutator):
    """Replaces each load by a variable: the same one for both threads when ``shared``."""

    def __init__(
        self, proof: UniformityProof, rename: Mapping[Any, Any], an: Analyzer, locals_: set[int]
    ) -> None:
        self.proof, self.rename, self.an, self.locals = proof, rename, an, locals_
        self.first: list[Any] = []  # (var for thread a, var for thread b)

    def visit_Call(self, call: Any) -> Any:
        call = self.generic_visit(call)
        effect = call.op.get_attr("TCallEffectKind") if isinstance(call.op, ir.Op) else None
        if effect is not None and int(effect) <= 1:  # kExprAnnotation, kPure
            return call
        # a side effect or a hidden input (a shuffle, clock()): its value is per thread
        mine = tirx.Var("call_a", call.ty)
        self.first.append((mine, tirx.Var("call_b", call.ty)))
        return mine

    def visit_TensorLoad(self, load: Any) -> Any:
        indices = [self.visit(i) for i in load.indices]
        ty = load.ty
        mine = tirx.Var("load_a", ty)
        # thread b's index: its thread indices and the values it loaded itself
        theirs_of = {**self.rename, **{a: b for a, b in self.first if a is not b}}
        same = self.proof.holds_one_value(load.source, self.locals) and all(
            _proved(self.an, tirx.EQ(i, substitute(i, theirs_of))) for i in indices
        )
        theirs = mine if same else tirx.Var("load_b", ty)
        self.first.append((mine, theirs))
        return mine


def _proved(an: Analyzer, claim: Any) -> bool:
    return bool(an.can_prove(claim, ProofStrength.SYMBOLIC_BOUND))


class UniformityProof:
    """Proves conditions of one kernel block-uniform (see the module docstring).

    Args:
        func: the kernel.
    """

    def __init__(self, func: tirx.PrimFunc) -> None:
        self._extents = collect_thread_extents(func)
        #: thread indices, and loop/Bind variables whose value may differ between threads
        self._per_thread: dict[Any, int] = dict(self._extents)
        #: node handles of the ``_per_thread`` variables
        self._per_thread_handles = {hash(v) for v in self._per_thread}
        self._premises: dict[int, list[Any]] = {}
        self._collect_premises(func.body, [])
        self._answers: dict[tuple[int, Any], tuple[Any, bool]] = {}
        self._func = func

    @functools.cached_property
    def _read_only(self) -> set[int]:
        """The global buffers nothing in the kernel writes, by hash (found on first need)."""
        return set(unwritten_global_buffers(self._func))

    @functools.cached_property
    def _locals(self) -> set[int]:
        """The uniform local buffers, by hash (proved on first need: most kernels never ask,
        and the proof runs once per local store)."""
        return {
            hash(b)
            for b in uniform_local_buffers(
                self._func, lambda expr, uniform: not self._same_for_all(expr, [], uniform)
            )
        }

    def holds_one_value(self, buffer: Any, locals_: set[int] | None = None) -> bool:
        """Whether a word of ``buffer``, read at the same index, gives every thread of the
        block one value (``locals_``: the uniform local buffers, by hash)."""
        scope = buffer_scope(buffer) or ""
        if scope in SHARED_SCOPES:
            return True
        if scope.startswith("local"):
            return hash(buffer) in (self._locals if locals_ is None else locals_)
        return hash(buffer) in self._read_only

    def reads_unchanging_memory(self, expr: Any) -> bool:
        """Whether every load in ``expr`` reads a kernel parameter nothing in the kernel
        writes and ``expr`` calls nothing: it then gives the same value whenever a thread
        evaluates it (a shared or local word, or what a call returns, may change between
        two threads' reads). True for an expression that loads nothing."""
        unchanging = True

        def check(node: Any) -> None:
            nonlocal unchanging
            if isinstance(node, ir.expr.Call) or hash(node.source) not in self._read_only:
                unchanging = False

        post_order_visit(expr, check, (ir.expr.TensorLoad, ir.expr.Call))
        return unchanging

    def _collect_premises(self, stmt: Any, premises: list[Any]) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            held = list(premises)
            for child in ffi_list(stmt.seq):
                self._collect_premises(child, held)
                stated = _stated(child)
                if stated is not None:
                    held = [*held, stated]
            return
        defined = _definition(stmt)
        if defined is not None and _varies(defined[1], self._per_thread_handles):
            self._per_thread[defined[0]] = 0
            self._per_thread_handles.add(hash(defined[0]))
        for cond in _control_expressions(stmt):
            if isinstance(cond, (ir.expr.Var, tirx.IntImm)):
                continue  # shared by many statements: no premise is known to hold at all
            # a node at two places: only what holds at both (conservatively: nothing)
            self._premises[hash(cond)] = [] if hash(cond) in self._premises else list(premises)
        for child in nested_statements(stmt):
            self._collect_premises(child, premises)

    def is_block_uniform(self, cond: Any, scope: AccessScope | None = None) -> bool:
        """Whether every thread of the block evaluates ``cond`` (written at a statement in
        ``scope``) alike."""
        key = (hash(cond), scope)
        hit = self._answers.get(key)
        if hit is None or not hit[0].same_as(cond):
            hit = (cond, self._prove(cond, scope))
            self._answers[key] = hit
        return hit[1]

    def _prove(self, cond: Any, scope: AccessScope | None) -> bool:
        premises = list(self._premises.get(hash(cond), []))
        if isinstance(cond, tirx.Add):  # a loop's `min + extent`
            premises += self._premises.get(hash(cond.b), [])
        if scope is not None:
            premises += [c if holds else tirx.Not(c) for c, holds in scope.conditions]
            premises = [scope.resolve(p) for p in premises]
            cond = scope.resolve(cond)
        # the uniform locals matter only to a condition that loads a local buffer
        locals_ = self._locals if loads_local_buffer([cond, *premises]) else set()
        return self._same_for_all(cond, premises, locals_)

    def _same_for_all(self, expr: Any, premises: list[Any], locals_: Any) -> bool:
        """Whether ``expr`` is proved equal in two arbitrary threads of the block."""
        if not _varies(expr, self._per_thread_handles):
            return True  # no thread index, per-thread variable, load or call
        locals_ = {hash(b) for b in locals_} if not isinstance(locals_, set) else locals_
        cond = expr
        an = Analyzer()
        if an.is_z3_enabled:
            an.set_z3_timeout_ms(_Z3_TIMEOUT_MS)
        rename: dict[Any, Any] = {}
        for var, extent in self._per_thread.items():
            rename[var] = tirx.Var(f"{var.name}_b", var.ty)
            if extent > 0:
                an.bind(var, ir.Range(0, extent))
                an.bind(rename[var], ir.Range(0, extent))
        thread_free = [p for p in premises if not _varies(p, self._per_thread_handles)]
        multiples = _multiples(thread_free)
        if multiples:
            # `n % 16 == 0` as `n = 16 * n'`: the analyzer then sees `(ty + n) // 2 % 16`
            # through (it does not use the premise inside a division)
            cond = substitute(cond, multiples)
            thread_free = [substitute(p, multiples) for p in thread_free]
        # the premises hold for the load indices too (`C[(ty + n) // 2]` under
        # `n % 16 == 0` reads one word), so they are in force before the loads are matched
        stack = [an.constraint_scope(p) for p in thread_free if str(p.ty) == "bool"]
        for ctx in stack:
            ctx.__enter__()
        try:
            loads = _Loads(self, rename, an, locals_)
            mine = loads.visit(cond)
            distinct = {a: b for a, b in loads.first if a is not b}
            if not distinct and not _mentions(mine, self._per_thread_handles):
                return True  # the same expression in both threads
            theirs = substitute(mine, {**rename, **distinct})
            claim = tirx.EQ(mine, theirs) if str(mine.ty) != "bool" else tirx.Or(
                tirx.And(mine, theirs), tirx.And(tirx.Not(mine), tirx.Not(theirs))
            )
            return _proved(an, claim)
        finally:
            for ctx in reversed(stack):
                ctx.__exit__(None, None, None)


def _multiples(premises: list[Any]) -> dict[Any, Any]:
    """``{n: c * n'}`` for each premise ``n % c == 0`` (``n`` a variable, ``c > 1`` a
    constant; ``n'`` a fresh variable)."""
    out: dict[Any, Any] = {}
    for premise in premises:
        if not isinstance(premise, tirx.EQ):
            continue
        for mod, zero in ((premise.a, premise.b), (premise.b, premise.a)):
            if (
                isinstance(mod, (tirx.FloorMod, tirx.Mod))
                and isinstance(mod.a, ir.expr.Var)
                and isinstance(mod.b, tirx.IntImm)
                and int(mod.b.value) > 1
                and isinstance(zero, tirx.IntImm)
                and int(zero.value) == 0
                and not any(mod.a.same_as(v) for v in out)
            ):
                fresh = tirx.Var(f"{mod.a.name}_div{int(mod.b.value)}", mod.a.ty)
                out[mod.a] = fresh * mod.b
    return out


def _mentions(expr: Any, handles: AbstractSet[int]) -> bool:
    return _reads(expr, handles, memory=False)


def _varies(expr: Any, per_thread: AbstractSet[int]) -> bool:
    """Whether ``expr`` reads a per-thread variable (``per_thread``: their node handles) or
    memory (conservatively per thread)."""
    return _reads(expr, per_thread, memory=True)


def _reads(expr: Any, handles: AbstractSet[int], *, memory: bool) -> bool:
    """Whether ``expr`` reads one of the variables whose node handles are ``handles``, or,
    with ``memory``, a load or a call."""
    found = False

    def visit(node: Any) -> None:
        nonlocal found
        kind = kind_by_class(_NODE_KINDS, node, _read_kind)
        if kind == "var":
            found = found or hash(node) in handles
        elif kind == "memory" and memory:
            found = True

    post_order_visit(expr, visit)
    return found


#: node class -> "var", "memory" (a load or a call) or "other"
_NODE_KINDS: dict[type, str] = {}


def _read_kind(node: Any) -> str:
    cls = type(node)
    if issubclass(cls, ir.expr.Var):
        return "var"
    if cls.__name__ == "TensorLoad" or issubclass(cls, ir.expr.Call):
        return "memory"
    return "other"


def _definition(stmt: Any) -> tuple[Any, Any] | None:
    """``(variable, the value that may make it per thread)`` for a ``Bind`` or a serial
    loop (its start)."""
    if isinstance(stmt, tirx.Bind):
        return stmt.var, stmt.value
    if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.THREAD_BINDING:
        step = stmt.step if stmt.step is not None else tirx.IntImm("int32", 1)
        return stmt.loop_var, tirx.Add(stmt.min, step)
    return None


def _control_expressions(stmt: Any) -> list[Any]:
    if isinstance(stmt, (tirx.IfThenElse, tirx.While)):
        return [stmt.condition]
    if isinstance(stmt, tirx.For):
        return [stmt.extent]
    return []
