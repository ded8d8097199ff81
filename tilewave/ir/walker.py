"""A reflection-based visitor and mutator over ``tvm.tirx`` statements and expressions.

TVM 0.26/0.27 ship no Python statement functor for ``tirx``. Every node exposes its
fields through FFI reflection (``type(node).__tvm_ffi_type_info__``), so one generic
walker covers every node kind, present and future:

* :class:`TIRVisitor` calls ``visit_<ClassName>(node)`` where defined, else visits the
  node's children (statements, expressions, arrays and maps of them, ``IterVar``,
  ``Range``).
* :class:`TIRMutator` does the same but returns a node; a node is rebuilt (through
  ``ffi.MakeObjectFromPackedArgs``) only when one of its children changed, so unchanged
  subtrees come back as the *same* object.
* :func:`substitute` and :func:`post_order_visit` are built on them.

Types (``ty`` fields, ``BufferType``) and source spans are not walked: they are not
statements or expressions.
"""

from __future__ import annotations

import functools
import itertools
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import tvm
import tvm_ffi
from tvm import ir, tirx

from tilewave.kernel_memory import kernel_table, node_fact, remember

__all__ = [
    "TIRMutator",
    "TIRVisitor",
    "expect_repeated_walks",
    "ffi_list",
    "kind_by_class",
    "node_fields",
    "node_is",
    "post_order_visit",
    "rebuild",
    "rebuild_seq",
    "replace_nodes",
    "rewrite_calls",
    "seq_stmt",
    "substitute",
    "walk_nodes",
]

_make_object = tvm_ffi.get_global_func("ffi.MakeObjectFromPackedArgs")

# Fields that never hold statements/expressions to walk.
_SKIPPED_FIELDS = frozenset({"span", "ty"})
# Leaves: nodes with no walkable children (their fields are names, values, types).
_LEAF_TYPES: tuple[type, ...] = (ir.Op, ir.GlobalVar, ir.expr.Var, tirx.IntImm, tirx.FloatImm,
                                 ir.expr.StringImm)
# Walkable node kinds besides Stmt and Expr.
_AUX_NODE_TYPES: tuple[type, ...] = (tirx.IterVar, ir.Range)


@functools.cache
def _all_fields(cls: type) -> tuple[Any, ...]:
    chain = []
    info = getattr(cls, "__tvm_ffi_type_info__", None)
    while info is not None:
        chain.append(info)
        info = info.parent_type_info
    return tuple(f for info in reversed(chain) for f in info.fields)


def node_is(node: Any, cls: type | tuple[type, ...]) -> bool:
    """``isinstance(node, cls)``, answered once per (node class, ``cls``) and remembered:
    for TVM's node classes (``ABCMeta``) a failing ``isinstance`` runs a Python-level
    instance check (about a microsecond), a dictionary hit far less."""
    key = (type(node), cls)
    found = _NODE_IS.get(key)
    if found is None:
        found = _NODE_IS[key] = isinstance(node, cls)
    return found


_NODE_IS: dict[tuple[type, Any], bool] = {}


def kind_by_class(table: dict[type, Any], node: Any, classify: Callable[[Any], Any]) -> Any:
    """``classify(node)``, asked once per node class and remembered in ``table``.

    Hot walks sort nodes this way: ``isinstance`` against TVM node classes goes through
    ``ABCMeta`` and costs about a microsecond where it fails, a dictionary hit far less.
    ``classify`` sees the first node of its class (``issubclass(type(node), ...)`` tests).
    """
    kind = table.get(type(node))
    if kind is None:
        kind = table[type(node)] = classify(node)
    return kind


@functools.cache
def node_fields(cls: type) -> tuple[str, ...]:
    """Names of the reflected fields of node class ``cls`` that may hold child nodes.

    Parent fields come first, as in the C++ object layout; ``span`` and ``ty`` are left out.
    """
    return tuple(f.name for f in _all_fields(cls) if f.name not in _SKIPPED_FIELDS)


@functools.cache
def _var_only_fields(cls: type) -> frozenset[str]:
    """Fields whose schema is exactly ``ir.Var``: they accept a Var, never another expression."""
    names = set()
    for field in _all_fields(cls):
        schema = (field.metadata or {}).get("type_schema")
        if schema and json.loads(schema).get("type") == "ir.Var":
            names.add(field.name)
    return frozenset(names)


def ffi_list(items: Any) -> list[Any]:
    """``items`` (an FFI ``Array``, such as ``SeqStmt.seq``, or any iterable) as a list.

    Iterating an FFI ``Array`` asks C++ for its length again at every element (~7 us an
    element) and a slice goes through Python index helpers (~0.8 us); calling the element
    getter directly costs ~0.5 us, which matters for the statement list of a large kernel
    and for the thousands of small arrays the analyses read."""
    if type(items) is tvm_ffi.Array or node_is(items, tvm_ffi.Array):
        item = _array_item
        size = _array_size(items)
        if size == 1:  # (most arrays read are one index or one variable: no loop frame)
            return [item(items, 0)]
        return [item(items, i) for i in range(size)]
    return list(items)


def statements_of(seq: Any) -> tuple[Any, ...]:
    """The statements of the ``SeqStmt`` ``seq``, read once per node and remembered (a
    kernel's statement lists, hundreds of statements long when unrolled, are read again in
    every fixed-point round and by several analyses; each read is an FFI call per item).
    Callers get the same tuple every time."""
    return node_fact(_STATEMENTS, seq, _read_statements, _STATEMENTS_LIMIT)


def _read_statements(seq: Any) -> tuple[Any, ...]:
    return tuple(ffi_list(seq.seq))


#: statements_of's lists by SeqStmt handle, with the node
_STATEMENTS: dict[int, tuple[tuple[Any, ...], Any]] = kernel_table()
_STATEMENTS_LIMIT = 100_000

_SEQUENCES = (list, tuple, tvm_ffi.Array)
_array_item = tvm_ffi.get_global_func("ffi.ArrayGetItem")
_array_size = tvm_ffi.get_global_func("ffi.ArraySize")


def _is_node(value: Any) -> bool:
    return isinstance(value, (tirx.Stmt, ir.expr.Expr, *_AUX_NODE_TYPES))


def rebuild(node: Any, changes: Mapping[str, Any]) -> Any:
    """Return a copy of ``node`` with the fields in ``changes`` replaced.

    Every other field (including ``span`` and ``ty``) is carried over unchanged.
    """
    type_key = type(node).__tvm_ffi_type_info__.type_key
    args: list[Any] = []
    for field in _all_fields(type(node)):
        args.append(field.name)
        args.append(changes[field.name] if field.name in changes else getattr(node, field.name))
    return _make_object(type_key, *args)


class TIRVisitor:
    """Read-only walk over a TIR statement or expression tree.

    Subclasses define ``visit_<ClassName>(self, node)`` (``visit_For``, ``visit_BufferStore``,
    ``visit_Call``, ``visit_TensorLoad``...) and call :meth:`generic_visit` inside it to keep
    descending. Children are visited in field order, which for statements is execution order.

    Example::

        class CountStores(TIRVisitor):
            def __init__(self):
                self.count = 0
            def visit_BufferStore(self, node):
                self.count += 1
                self.generic_visit(node)
    """

    #: the C++ structural visitor of the walk in progress (``None`` outside a walk)
    _active: Any = None
    #: an exception a ``visit_<Name>`` method raised inside the C++ walk: the walk stops
    #: and it is raised again, unchanged, in Python (an exception crossing the C++ walker
    #: would come back with TVM's IR-location text appended to its message)
    _failure: BaseException | None = None

    def visit(self, node: Any) -> None:
        """Visit ``node`` (a Stmt, Expr, IterVar, Range, or a list/array of them)."""
        if node is None:
            return
        if node_is(node, _SEQUENCES):
            for item in ffi_list(node):
                self.visit(item)
            return
        if self._active is not None:
            _visitor_visit(self._active, node)
            self._reraise()
            return
        if _walks_in_python(type(self)):
            method = getattr(self, "visit_" + type(node).__name__, None)
            if method is not None:
                method(node)
            else:
                self.generic_visit(node)
            return
        _structural_visit(node, self._entries())
        self._reraise()

    def _reraise(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def generic_visit(self, node: Any) -> None:
        """Visit every child of ``node``."""
        if self._active is not None:
            _default_visit(self._active, node)
            self._reraise()
            return
        if isinstance(node, _LEAF_TYPES):
            return
        for name in node_fields(type(node)):
            self._visit_value(getattr(node, name))

    def _visit_value(self, value: Any) -> None:
        if _is_node(value):
            self.visit(value)
        elif isinstance(value, (tvm_ffi.Array, list, tuple)):
            for item in value:
                self._visit_value(item)
        elif isinstance(value, tvm_ffi.Map):
            for item in value.values():
                self._visit_value(item)

    def _entries(self) -> list[tuple[int, Callable[[Any, Any], Any]]]:
        """C++ dispatch entries: types pruned, ``visit_<Name>`` methods called, every other
        node descended in C++ without calling Python. Built once per visitor (a collector
        visits each index and value of a statement separately)."""
        entries = self.__dict__.get("_dispatch_entries")
        if entries is None:
            entries = self.__dict__["_dispatch_entries"] = self._new_entries()
        return entries

    def _new_entries(self) -> list[tuple[int, Callable[[Any, Any], Any]]]:
        # The entries are kept on the visitor, so they hold it weakly: a strong reference
        # would make a cycle, and every collector would then wait for the cyclic collector
        # instead of being freed when its last reference goes (118,000 objects left for it
        # by one pass over the 5,000-statement scaling kernel).
        owner = weakref.ref(self)
        cls = type(self)
        entries: list[tuple[int, Callable[[Any, Any], Any]]] = [(_TYPE_ENTRY, _PRUNE_TYPES)]
        for name, index in _visit_methods(cls):
            entries.append((index, _dispatcher(owner, getattr(cls, name))))
        return entries


def _dispatcher(
    owner: Callable[[], Any], method: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], Any]:
    """The C++ walk's callback for one ``visit_<Name>`` method of the visitor ``owner()``."""

    def dispatch(value: Any, visitor: Any) -> Any:
        walker = owner()
        outer, walker._active = walker._active, visitor
        try:
            method(walker, value)
        except BaseException as failure:
            walker._failure = failure
            return tvm_ffi.VisitInterrupt()
        finally:
            walker._active = outer
        return None

    return dispatch


@functools.cache
def _walks_in_python(cls: type) -> bool:
    """Visitors that override ``visit`` (to see every node, e.g. to keep a path) or visit
    operators walk in Python; the others are dispatched from C++."""
    return cls.visit is not TIRVisitor.visit or hasattr(cls, "visit_Op")


@functools.cache
def _node_classes() -> dict[str, list[type]]:
    """Every FFI node class that can sit in a statement tree, by class name."""
    found: dict[str, list[type]] = {}
    pending: list[type] = [tirx.Stmt, ir.expr.Expr, tirx.IterVar, ir.Range]
    seen: set[type] = set()
    while pending:
        cls = pending.pop()
        if cls in seen:
            continue
        seen.add(cls)
        found.setdefault(cls.__name__, []).append(cls)
        pending.extend(cls.__subclasses__())
    return found


@functools.cache
def _visit_methods(cls: type) -> tuple[tuple[str, int], ...]:
    """``(method name, type index)`` of the ``visit_<Name>`` methods ``cls`` defines."""
    classes = _node_classes()
    out = []
    for name in dir(cls):
        if not name.startswith("visit_"):
            continue
        for node_cls in classes.get(name[len("visit_"):], ()):
            if hasattr(node_cls, "__tvm_ffi_type_info__"):
                out.append((name, _TYPE_INDEX(node_cls, api_name="tilewave.walker")))
    return tuple(out)


class TIRMutator:
    """Rebuilding walk over a TIR statement or expression tree.

    Subclasses define ``visit_<ClassName>(self, node)`` returning the replacement node, and
    call :meth:`generic_visit` to mutate the children. A node whose children all come back
    unchanged (the same objects) is returned as is, so an identity mutation returns the
    identical tree.

    A statement visitor may return ``None`` to delete the statement from a ``SeqStmt``.
    """

    def visit(self, node: Any) -> Any:
        """Return the mutated form of ``node``."""
        if node is None:
            return None
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Any) -> Any:
        """Mutate every child of ``node``; rebuild ``node`` only if a child changed."""
        if isinstance(node, _LEAF_TYPES):
            return node
        changes: dict[str, Any] = {}
        var_only = _var_only_fields(type(node))
        for name in node_fields(type(node)):
            old = getattr(node, name)
            new = self._mutate_value(old)
            if new is old:
                continue
            if name in var_only and not isinstance(new, ir.expr.Var):
                # A definition site (loop_var, buffer) cannot become an arbitrary expression.
                continue
            changes[name] = new
        if not changes:
            return node
        if isinstance(node, tirx.SeqStmt):
            return rebuild_seq(changes["seq"], node)
        return rebuild(node, changes)

    def _mutate_value(self, value: Any) -> Any:
        if _is_node(value):
            return self.visit(value)
        if isinstance(value, (tvm_ffi.Array, list, tuple)):
            items = list(value)
            new_items = [self._mutate_value(item) for item in items]
            if all(a is b for a, b in zip(items, new_items, strict=True)):
                return value
            return [item for item in new_items if item is not None]
        if isinstance(value, tvm_ffi.Map):
            new_map = {key: self._mutate_value(item) for key, item in value.items()}
            if all(new_map[key] is item for key, item in value.items()):
                return value
            return new_map
        return value


def seq_stmt(items: list[Any]) -> tirx.SeqStmt:
    """``tirx.SeqStmt(items)`` for statements of a TIR tree or made by tilewave, built by
    the FFI constructor directly (the Python constructor first looks at every item for
    legacy Python-side wrappers with a ``body``, which such statements never are; on a
    statement list of thousands that look costs more than the node). The items are
    remembered as the node's :func:`statements_of` (a list the caller built is not read
    back through the FFI, an element at a time)."""
    node = _SEQ_STMT(items, None)
    # (the node kept alive with its list: its handle cannot come to name another)
    remember(_STATEMENTS, hash(node), (tuple(items), node), _STATEMENTS_LIMIT)
    return node


_SEQ_STMT = tirx._ffi_api.SeqStmt


def rebuild_seq(items: list[Any], original: tirx.SeqStmt) -> tirx.Stmt:
    """``original`` with the statements ``items`` (``None``: deleted; nested sequences
    flattened; no statement left: ``T.evaluate(0)``; one left: that statement)."""
    flat: list[tirx.Stmt] = []
    for item in items:
        if isinstance(item, tirx.SeqStmt):
            flat.extend(ffi_list(item.seq))
        elif item is not None:
            flat.append(item)
    if not flat:
        return tirx.Evaluate(tirx.IntImm("int32", 0))
    if len(flat) == 1:
        return flat[0]
    return rebuild(original, {"seq": flat})


_TYPE_INDEX_OF = tvm_ffi.structural._callback_type_to_type_index


@functools.cache
def _TYPE_INDEX(cls: Any, api_name: str) -> int:
    """The FFI type index of a node class (constant: looked up once per class)."""
    return _TYPE_INDEX_OF(cls, api_name=api_name)


_TYPE_ENTRY = _TYPE_INDEX(ir.Type, api_name="tilewave.walker")
_VAR_ENTRY = _TYPE_INDEX(ir.expr.Var, api_name="tilewave.walker")


def _keep(value: Any, _mutator: Any) -> Any:
    return value  # types (and the expressions inside them) are not substituted


def _native(name: str, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The C++ function ``name`` of this TVM build, else ``fallback`` (same behaviour).

    Every expression carries a type node, so a walk that keeps out of types stops at one
    per expression; answering that stop in C++ instead of a Python call makes a call- or
    variable-level walk about twice as fast. ``tvm_ffi`` registers ``testing.nop``
    (returns nothing: "handled, do not enter") and ``testing.echo`` (returns its first
    argument: "keep this node")."""
    found = tvm_ffi.get_global_func(name, allow_missing=True)
    return fallback if found is None else found


def _prune(_value: Any, _visitor: Any) -> None:
    return None  # types are not walked


#: the type-node entries of walks and mutations (see :func:`_native`)
_PRUNE_TYPES = _native("testing.nop", _prune)
_KEEP_TYPES = _native("testing.echo", _keep)


def _constant(value: Any, var: Any) -> Any:
    """A Python number as a TIR constant of ``var``'s type (int32/float32 by default)."""
    dtype = str(getattr(var.ty, "dtype", ""))
    if isinstance(value, float) or (isinstance(value, int) and dtype.startswith("float")):
        return tirx.FloatImm(dtype if dtype.startswith("float") else "float32", float(value))
    if isinstance(value, bool):
        return tirx.IntImm("bool", int(value))
    if isinstance(value, int):
        return tirx.IntImm(dtype if dtype.startswith(("int", "uint")) else "int32", value)
    return tvm.runtime.convert(value)


class Deferred:
    """A substitution value worked out only when :func:`substitute` meets its variable
    (``compute()`` runs once; most bound values are never needed by the expressions a
    caller resolves)."""

    __slots__ = ("_compute", "_value")

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute: Callable[[], Any] | None = compute
        self._value: Any = None

    def value(self) -> Any:
        """The value, computed on the first call."""
        if self._compute is not None:
            self._value = self._compute()
            self._compute = None
        return self._value


def substitute(
    node: Any, mapping: Mapping[ir.expr.Var, Any], by_handle: Mapping[int, Any] | None = None
) -> Any:
    """Replace every use of the variables in ``mapping`` inside ``node``.

    Args:
        node: a statement or expression (or a list of them).
        mapping: ``{var: expr}``; Python ints and floats are converted to TIR constants,
            and a :class:`Deferred` value is computed when its variable is met.
        by_handle: ``mapping`` keyed by the variables' handles (``hash``), when the caller
            keeps one (a scope resolving many expressions with the same bindings);
            variables are looked up by handle (a lookup that meets the same variable
            under another Python wrapper would compare them with ``==``, which builds a
            TIR ``EQ`` node).

    Definition sites (a ``For`` loop variable, a ``BufferStore`` buffer) are replaced only
    by another ``Var``; types (buffer shapes) are left alone. Returns ``node`` itself when
    nothing was replaced. The walk runs in C++ (``tvm_ffi``'s structural mutator); Python
    is called only at variables.
    """
    if not mapping:
        return node
    if isinstance(node, (list, tuple)):
        return type(node)(substitute(item, mapping, by_handle) for item in node)
    values = by_handle if by_handle is not None else {hash(v): x for v, x in mapping.items()}

    def on_var(var: Any, mutator: Any) -> Any:
        value = values.get(hash(var))
        if value is None:
            return var
        if type(value) is Deferred:
            value = value.value()
        if not node_is(value, tvm_ffi.Object):
            value = _constant(value, var)
        if not isinstance(value, ir.expr.Var) and _def_region_kind(mutator) != 0:
            return var  # a definition site accepts only another variable
        return value

    entries = [(_TYPE_ENTRY, _KEEP_TYPES, False), (_VAR_ENTRY, on_var, False)]
    out = _structural_mutate(node, entries)
    return node if out.same_as(node) else out


_structural_mutate = tvm_ffi.get_global_func("ffi.StructuralMutate")
#: ``StructuralMutator.def_region_kind`` as a plain int (0: not at a definition site),
#: without the enum object the method builds at every variable substituted
_def_region_kind = tvm_ffi.get_global_func("ffi.StructuralMutatorDefRegionKind")
_structural_walk = tvm_ffi.get_global_func("ffi.StructuralWalk")
_SKIP = int(tvm_ffi.WalkResult.SKIP)


def walk_nodes(node: Any, callbacks: Mapping[type, Callable[[Any], Any]]) -> Any:
    """Call ``callbacks[cls](n)`` on every node ``n`` of a type in ``callbacks`` under
    ``node``, parents before children, in C++ (types such as buffer shapes are not entered).

    A callback may return :class:`tvm_ffi.VisitInterrupt` to stop the walk (that object is
    returned) or :data:`tvm_ffi.WalkResult.SKIP` to skip the node's children.
    """
    entries = [(_TYPE_ENTRY, lambda _value: _SKIP)]
    entries += [(_TYPE_INDEX(cls, api_name="tilewave.walker"), fn) for cls, fn in callbacks.items()]
    return _structural_walk(node, entries, [], int(tvm_ffi.WalkOrder.PREORDER))


_structural_visit = tvm_ffi.get_global_func("ffi.StructuralVisit")
_default_visit = tvm_ffi.get_global_func("ffi.StructuralVisitorDefaultVisit")
_visitor_visit = tvm_ffi.get_global_func("ffi.StructuralVisitorVisit")
_NODE_ENTRIES = [
    _TYPE_INDEX(cls, api_name="tilewave.walker")
    for cls in (tirx.Stmt, ir.expr.Expr, tirx.IterVar, ir.Range)
]
_CALL_ENTRY = _TYPE_INDEX(ir.expr.Call, api_name="tilewave.walker")


def post_order_visit(
    node: Any, callback: Callable[[Any], None], types: tuple[type, ...] | None = None
) -> None:
    """Call ``callback`` on every statement and expression under ``node``, children first
    (a call's operator before its arguments), in field order; types are not entered.

    With ``types``, ``callback`` sees only nodes of those classes (subclasses included) and
    the rest of the tree is walked without calling Python. The walk runs in C++
    (``tvm_ffi``'s structural visitor); a statement walked again with ``types`` among
    calls, stores, evaluates, loops, attributes, bindings, allocations, branches and
    sequences is answered from a list its second walk made (the same nodes in the same
    order).
    """
    if node is None:
        return
    if isinstance(node, (list, tuple)):
        for item in node:
            post_order_visit(item, callback, types)
        return
    if types is not None and isinstance(node, tirx.Stmt):
        index = _indexed_nodes(node, types)
        if index is not None:
            nodes, by_class = index
            wanted = tuple(types)
            runs = [at for kind, at in by_class.items() if issubclass(kind, wanted)]
            if len(runs) == 1:
                positions: Iterable[int] = runs[0]
            else:  # (several classes: their nodes in walk order again)
                positions = sorted(itertools.chain.from_iterable(runs))
            for at in positions:
                callback(nodes[at])
            return
    _walk(node, callback, types)


#: node classes a statement's shared index holds (see :func:`_indexed_nodes`)
_INDEXED_TYPES = (
    ir.expr.Call, tirx.BufferStore, tirx.Evaluate, tirx.For, tirx.AttrStmt, tirx.Bind,
    tirx.AllocBuffer, tirx.DeclBuffer, tirx.IfThenElse, tirx.While, tirx.SeqStmt,
)  # fmt: skip
#: statements walked once (handle -> node, kept alive so the handle stays theirs)
_WALKED_ONCE: dict[int, Any] = kernel_table()
#: a statement's index: its nodes of _INDEXED_TYPES in post order, and their positions in
#: that list by node class (a walk for evaluates meets only the evaluates, not every call
#: and store of the kernel)
_Index = tuple[list[Any], dict[type, list[int]]]
#: statements walked more than once: handle -> (node, its index)
_INDEXES: dict[int, tuple[Any, _Index]] = kernel_table()
_REMEMBERED = 16


def _indexed_nodes(node: Any, types: tuple[type, ...]) -> _Index | None:
    """The index of statement ``node`` (its nodes of :data:`_INDEXED_TYPES` in post
    order, and by class), from one walk shared by every later walk of the same statement;
    None (walk it) when ``types`` holds another class or ``node`` is walked for the first
    time. A kernel's body is walked by a dozen per-kernel analyses: one C++ walk of a
    5,000-statement body costs ~25 ms, a pass over the list a few."""
    if not all(issubclass(cls, _INDEXED_TYPES) for cls in types):
        return None
    key = hash(node)
    found = _INDEXES.get(key)
    if found is not None:
        return found[1]
    if _WALKED_ONCE.pop(key, None) is None:
        _remember(_WALKED_ONCE, key, node)
        return None
    return _index(node, key)


def _index(node: Any, key: int) -> _Index:
    nodes: list[Any] = []
    _walk(node, nodes.append, _INDEXED_TYPES)
    by_class: dict[type, list[int]] = {}
    for at, item in enumerate(nodes):
        positions = by_class.get(type(item))
        if positions is None:
            positions = by_class[type(item)] = []
        positions.append(at)
    index = (nodes, by_class)
    _remember(_INDEXES, key, (node, index))
    return index


def expect_repeated_walks(node: Any) -> None:
    """Index statement ``node`` for :func:`post_order_visit` now: several analyses are
    about to walk it (a kernel body), so its first walk builds the shared list instead of
    walking it once without one."""
    key = hash(node)
    if key not in _INDEXES:
        _WALKED_ONCE.pop(key, None)
        _index(node, key)


def _remember(memo: dict[int, Any], key: int, value: Any) -> None:
    if len(memo) >= _REMEMBERED:
        memo.pop(next(iter(memo)))  # the oldest
    memo[key] = value


def _walk(node: Any, callback: Callable[[Any], None], types: tuple[type, ...] | None) -> None:
    """:func:`post_order_visit` of one node, in C++."""
    failures: list[BaseException] = []

    def guarded(step: Callable[[], None]) -> Any:
        # an exception crossing the C++ walker comes back with TVM's IR-location text
        # appended: stop the walk instead and raise it again, unchanged, below
        try:
            step()
        except BaseException as failure:
            failures.append(failure)
            return tvm_ffi.VisitInterrupt()
        return None

    def on_node(value: Any, visitor: Any) -> Any:
        if _default_visit(visitor, value) is not None or failures:
            return tvm_ffi.VisitInterrupt()
        try:  # (guarded, inlined: this runs at every node)
            callback(value)
        except BaseException as failure:
            failures.append(failure)
            return tvm_ffi.VisitInterrupt()
        return None

    def on_call(value: Any, visitor: Any) -> Any:
        if guarded(lambda: callback(value.op)) is not None:
            return tvm_ffi.VisitInterrupt()
        return on_node(value, visitor)

    entries = []
    if types is None or not all(issubclass(cls, tirx.Stmt) for cls in types):
        # types hold expressions (buffer shapes) but never statements: a walk that calls
        # Python only at statements may enter them in C++, cheaper than a Python call at
        # every type node to prune it
        entries.append((_TYPE_ENTRY, _PRUNE_TYPES))
    if types is None:
        entries.append((_CALL_ENTRY, on_call))
        entries += [(index, on_node) for index in _NODE_ENTRIES]
    else:
        entries += [(_TYPE_INDEX(cls, api_name="tilewave.walker"), on_node) for cls in types]
    _structural_visit(node, entries)
    if failures:
        raise failures[0]


def rewrite_calls(node: Any, rewrite: Callable[[ir.expr.Call], Any]) -> Any:
    """Return ``node`` with calls replaced by ``rewrite(call)``, innermost calls first.

    ``rewrite`` sees each call with its arguments already rewritten and returns the
    replacement expression, or ``None`` to keep the call. The walk runs in C++ (``tvm_ffi``'s
    structural mutator; types are not entered) and calls Python only at calls; ``node``
    itself comes back when nothing changed. An exception ``rewrite`` raises stops the
    rewriting and is raised again, unchanged, after the walk.
    """
    failures: list[BaseException] = []

    def on_call(value: Any, mutator: Any) -> Any:
        call = mutator.default_mutate(value)
        if failures:
            return call
        try:
            replacement = rewrite(call)
        except BaseException as failure:  # raised again below, without TVM's location text
            failures.append(failure)
            return call
        return call if replacement is None else replacement

    entries = [(_TYPE_ENTRY, _KEEP_TYPES, False), (_CALL_ENTRY, on_call, False)]
    out = _structural_mutate(node, entries)
    if failures:
        raise failures[0]
    return node if out.same_as(node) else out


def replace_nodes(node: Any, cls: type, replace: Callable[[Any], Any]) -> Any:
    """Return ``node`` with each node of class ``cls`` replaced by ``replace(n)``, parents
    first: ``replace`` returns the replacement (not walked further), or ``None`` to keep
    the node and walk its children. The walk runs in C++ and calls Python only at nodes of
    ``cls`` (types are not entered); ``node`` itself comes back when nothing changed."""

    def on_node(value: Any, mutator: Any) -> Any:
        replacement = replace(value)
        return mutator.default_mutate(value) if replacement is None else replacement

    entries = [
        (_TYPE_ENTRY, _KEEP_TYPES, False),
        (_TYPE_INDEX(cls, api_name="tilewave.walker"), on_node, False),
    ]
    out = _structural_mutate(node, entries)
    return node if out.same_as(node) else out
