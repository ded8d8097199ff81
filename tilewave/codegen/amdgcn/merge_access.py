"""Access merging: adjacent 4-byte global stores as one ``global_store_dwordx2/x4``, and
adjacent 4-byte global loads as one ``global_load_dwordx2/x3/x4``.

An unrolled row written element by element (``for j in T.unroll(4): B[i, j] = ...``, a
register tile's results) becomes one ``global_store_dword`` per element, all with the same
``vaddr`` and base and offsets ``o, o + 4, ...``. :func:`merge_stores` (kernel IR, virtual
registers, before allocation) replaces a run of four (else two) of them by one wide store at
the position of the last one, when

* the stores are ``global_store_dword`` with one ``vaddr`` operand, one base (``saddr``) and
  offsets ``o, o + 4, o + 8, o + 12`` (the first one's offset is the merged store's);
* their data can be one even-aligned register tuple: consecutive elements of one range
  starting at an even element, or distinct single VGPRs not yet in a range (they become the
  elements of a new range: every occurrence is renamed, which only constrains the
  allocator);
* the earlier stores can move down to the last: in between, nothing writes their data or
  address registers, no label, branch, EXEC write, barrier or explicit wait intervenes, and
  no other memory instruction uses the same buffer's base or one of its 4 KiB window
  bases (kernel arguments are distinct allocations, as TVM's own codegen assumes when it
  marks them ``noalias``; LDS is another address space).

:func:`merge_loads` is the mirror for loads (a stencil's ``A[i - 1]``, ``A[i]``,
``A[i + 1]``: offsets ``-4, 0, 4``, one ``dwordx3``): a run of two to four
``global_load_dword`` with one ``vaddr``, one base and consecutive offsets becomes one wide
load at the position of the first, its destinations renamed into an aligned range, when
the later loads can move up to it: in between nothing writes their address registers,
nothing reads or writes their destination registers, no store uses the same base, and no
label, branch, EXEC write, barrier or explicit wait intervenes.

:func:`merge_lds_reads` pairs two ``ds_read_b32`` of one address register (a tree
reduction's ``S[tx]`` and ``S[tx + 128]``) into one ``ds_read2_b32`` (offsets in dwords,
8 bits each) or ``ds_read2st64_b32`` (in units of 64 dwords), and two ``ds_read_b64`` (MFMA
fragments of consecutive K steps) into ``ds_read2_b64`` / ``ds_read2st64_b64``, at the
first read, when the
second can move up to it: no LDS write, barrier, wait, label, branch or EXEC write between,
and nothing between touches its destination or writes the address.

:func:`merge_short_loads` turns a run of 2, 4, 6 or 8 ``global_load_ushort`` at consecutive
2-byte offsets (``B[tx, 0..15]`` of an f16 tile staged into LDS) into one dword load per
pair: element ``2k`` is the low half of dword ``k``, element ``2k + 1`` its high half. Only
when every reader of every loaded value is a 16-bit store of it (``ds_write_b16``,
``global_store_short``): a low half is stored as it is (the store takes the low 16 bits), a
high half with the ``_d16_hi`` form of the store. The dword accesses need 4-byte alignment
of the base, which TVM's buffers have (``data_alignment`` 64) and HSA's unaligned access
mode does not even require.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from tilewave.codegen.amdgcn.isa import op_info
from tilewave.codegen.amdgcn.kir import (
    Instr,
    Label,
    Operand,
    Program,
    Sub,
    Sym,
    VReg,
    reg_units,
    renamed,
)

__all__ = ["merge_lds_reads", "merge_loads", "merge_short_loads", "merge_stores"]

Merge = tuple[int, Instr, list[int]]  # (position, wide instruction, positions merged into it)

_WIDE = {4: "global_store_dwordx4", 2: "global_store_dwordx2"}
_WIDE_LOAD = {2: "global_load_dwordx2", 3: "global_load_dwordx3", 4: "global_load_dwordx4"}
LOOKAHEAD = 64


def _offset(ins: Instr) -> int:
    for mod in ins.mods.split():
        if mod.startswith("offset:"):
            return int(mod.split(":", 1)[1])
    return 0


def _same_buffer(a: Operand, b: Operand) -> bool:
    """Whether base operands ``a`` and ``b`` may address the same buffer: the same
    register, or base pairs named for the same argument (a buffer's base and its 4 KiB
    window bases share the name ``base_<buffer>``)."""
    if a == b:
        return True
    name_a = getattr(a, "name", "") or getattr(getattr(a, "reg", None), "name", "")
    name_b = getattr(b, "name", "") or getattr(getattr(b, "reg", None), "name", "")
    return bool(name_a) and name_a == name_b


def _blocks_motion(ins: Instr | Label) -> bool:
    if isinstance(ins, Label) or ins.target is not None:
        return True
    unit = op_info(ins.opcode).unit
    return (unit in ("barrier", "wait") or "saveexec" in ins.opcode
            or any(isinstance(op, Sym) and op.name == "exec" for op in ins.defs))


def _window(body: list[Instr | Label], i: int) -> Iterator[tuple[int, Instr]]:
    """The instructions after position ``i`` (up to :data:`LOOKAHEAD`) an access may move
    across, with their positions: up to the first control-flow, barrier, wait or EXEC write."""
    for j in range(i + 1, min(len(body), i + 1 + LOOKAHEAD)):
        ins = body[j]
        if _blocks_motion(ins):
            return
        assert isinstance(ins, Instr)
        yield j, ins


def _tuple(data: list[Operand], renamed: dict[VReg, Sub]) -> Operand | None:
    """One aligned tuple holding ``data`` in order (recording new ranges in ``renamed``)."""
    data = [renamed.get(d, d) if isinstance(d, VReg) else d for d in data]
    n = len(data)
    if all(isinstance(d, Sub) and d.width == 1 for d in data):
        first = data[0]
        assert isinstance(first, Sub)
        if (first.index % 2 == 0 and first.reg.align % 2 == 0
                and all(d.reg is first.reg and d.index == first.index + k  # type: ignore[union-attr]
                        for k, d in enumerate(data))):
            return Sub(first.reg, first.index, n)
        return None
    singles = [d for d in data if isinstance(d, VReg) and d.cls == "v" and d.width == 1
               and d.fixed is None]
    if len(singles) != n or len({d.id for d in singles}) != n:
        return None
    whole = VReg("v", n, 2)
    for k, d in enumerate(singles):
        renamed[d] = Sub(whole, k)
    return Sub(whole, 0, n)


def _run(body: list[Instr | Label], i: int, width: int) -> list[int] | None:
    """Positions of ``width`` stores continuing the one at ``i`` (offsets +4 each), the
    earlier ones movable down to the last; None if there is no such run."""
    first = body[i]
    assert isinstance(first, Instr)
    vaddr, _, saddr = first.uses
    base = _offset(first)
    found = [i]
    for j, ins in _window(body, i):
        info = op_info(ins.opcode)
        want = base + 4 * len(found)
        if (ins.opcode == "global_store_dword" and ins.uses[0] == vaddr
                and ins.uses[2] == saddr and _offset(ins) == want):
            found.append(j)
            if len(found) == width:
                return found
            continue
        if info.unit in ("vmem", "smem") and any(_same_buffer(op, saddr) for op in ins.uses):
            return None  # the same buffer read or written in between
        moved = set().union(*(reg_units(body[k].uses[1]) for k in found))  # type: ignore[union-attr]
        moved |= reg_units(vaddr) | reg_units(saddr)
        if any(reg_units(d) & moved for d in ins.defs):
            return None  # a moved store's data or address changes before the last store
    return None


def _rewrite(program: Program, opcode: str, merge_at: Callable[..., Merge | None]) -> Program:
    """Apply ``merge_at(body, i, ranges)`` at every ``opcode`` instruction not merged yet:
    it returns (position, wide instruction, positions merged into it) or None; registers it
    put into new ranges (``ranges``) are renamed everywhere at the end."""
    body = list(program.body)
    ranges: dict[VReg, Sub] = {}
    removed: set[int] = set()
    for i, ins in enumerate(body):
        if i in removed or not isinstance(ins, Instr) or ins.opcode != opcode:
            continue
        got = merge_at(body, i, ranges, removed)
        if got is not None:
            at, wide, gone = got
            body[at] = wide
            removed.update(gone)
    out = [renamed(ins, ranges) for k, ins in enumerate(body) if k not in removed]
    return replace(program, body=out)


def _untouched(body: list[Instr | Label], i: int, j: int, op: Operand) -> bool:
    """Nothing at positions ``i..j-1`` reads or writes a register of ``op``."""
    units = reg_units(op)
    return not any(units & reg_units(x) for b in body[i:j] if isinstance(b, Instr)
                   for x in (*b.defs, *b.uses))


def _store_merge(body: list[Instr | Label], i: int, ranges: dict[VReg, Sub],
                 removed: set[int]) -> Merge | None:
    ins = body[i]
    assert isinstance(ins, Instr)
    for width in (4, 2):
        run = _run(body, i, width)
        if run is None or any(k in removed for k in run):
            continue
        data = _tuple([body[k].uses[1] for k in run], ranges)  # type: ignore[union-attr]
        if data is None:
            continue
        last = body[run[-1]]
        assert isinstance(last, Instr)
        mods = f"offset:{_offset(ins)}" if _offset(ins) else ""
        return run[-1], Instr(_WIDE[width], [], [ins.uses[0], data, ins.uses[2]], mods,
                              comment=last.comment), run[:-1]
    return None


def merge_stores(program: Program) -> Program:
    """``program`` with runs of adjacent dword global stores merged (see the module docs)."""
    return _rewrite(program, "global_store_dword", _store_merge)


def _load_run(body: list[Instr | Label], i: int, size: int = 4) -> list[int]:
    """Positions of loads of ``size`` bytes at consecutive offsets spanning at most 16
    bytes, the one at ``i`` (the first in program order) among them, the others movable up
    to ``i``; ordered by offset."""
    first = body[i]
    assert isinstance(first, Instr)
    vaddr, saddr = first.uses
    address = reg_units(vaddr) | reg_units(saddr)
    by_offset = {_offset(first): i}
    for j, ins in _window(body, i):
        if any(reg_units(d) & address for d in ins.defs):
            break
        if op_info(ins.opcode).is_store and any(_same_buffer(op, saddr) for op in ins.uses):
            break  # the same buffer written in between
        if (ins.opcode == first.opcode and ins.uses[0] == vaddr and ins.uses[1] == saddr
                and _offset(ins) not in by_offset and _untouched(body, i, j, ins.defs[0])):
            by_offset[_offset(ins)] = j
    lo = hi = _offset(first)
    while lo - size in by_offset and hi - lo < 16 - size:  # at most 16 bytes in all
        lo -= size
    while hi + size in by_offset and hi - lo < 16 - size:
        hi += size
    return [by_offset[o] for o in range(lo, hi + size, size)]


def _load_merge(body: list[Instr | Label], i: int, ranges: dict[VReg, Sub],
                removed: set[int]) -> Merge | None:
    ins = body[i]
    assert isinstance(ins, Instr)
    run = _load_run(body, i)
    if len(run) < 2 or any(k in removed for k in run):
        return None
    dsts = [body[k].defs[0] for k in run]  # type: ignore[union-attr]
    if not all(isinstance(d, VReg) and d not in ranges for d in dsts):
        return None
    data = _tuple(dsts, ranges)
    if data is None:
        return None
    low = body[run[0]]
    assert isinstance(low, Instr)
    return i, Instr(_WIDE_LOAD[len(run)], [data], list(ins.uses), low.mods,
                    comment=ins.comment), [k for k in run if k != i]


def merge_loads(program: Program) -> Program:
    """``program`` with runs of adjacent dword global loads merged (see the module docs)."""
    return _rewrite(program, "global_load_dword", _load_merge)


def _read2_form(first: int, second: int, size: int) -> tuple[str, str] | None:
    """(opcode, modifiers) of a ds_read2 of two ``size``-byte elements at byte offsets
    ``first`` and ``second``."""
    bits = 8 * size
    for opcode, unit in ((f"ds_read2_b{bits}", size), (f"ds_read2st64_b{bits}", 64 * size)):
        if first % unit == 0 and second % unit == 0 and 0 <= first // unit <= 255 \
                and 0 <= second // unit <= 255:
            return opcode, f"offset0:{first // unit} offset1:{second // unit}"
    return None


def _lds_partners(body: list[Instr | Label], i: int) -> Iterator[int]:
    """Positions of reads like ``body[i]`` of the same address that can move up to it."""
    first = body[i]
    assert isinstance(first, Instr)
    address = reg_units(first.uses[0])
    for j, ins in _window(body, i):
        info = op_info(ins.opcode)
        if (info.unit == "ds" and info.is_store) or any(reg_units(d) & address
                                                         for d in ins.defs):
            return
        if (ins.opcode == first.opcode and ins.uses[0] == first.uses[0]
                and _untouched(body, i, j, ins.defs[0])):
            yield j


def _lds_merge(body: list[Instr | Label], i: int, ranges: dict[VReg, Sub],
               removed: set[int]) -> Merge | None:
    ins = body[i]
    assert isinstance(ins, Instr)
    size = 8 if ins.opcode == "ds_read_b64" else 4
    # the first partner whose offsets a ds_read2 can encode
    found = next(((j, form) for j in _lds_partners(body, i) if j not in removed
                  and (form := _read2_form(_offset(ins), _offset(body[j]), size))), None)
    if found is None:
        return None
    j, form = found
    second = body[j]
    assert isinstance(second, Instr)
    dsts = [ins.defs[0], second.defs[0]]
    if not all(isinstance(d, VReg) and d not in ranges for d in dsts):
        return None
    if size == 4:
        data = _tuple(dsts, ranges)
    elif all(d.width == 2 and d.align == 2 and d.fixed is None  # type: ignore[union-attr]
             for d in dsts) and dsts[0] is not dsts[1]:
        whole = VReg("v", 4, 2)
        ranges[dsts[0]], ranges[dsts[1]] = Sub(whole, 0, 2), Sub(whole, 2, 2)  # type: ignore[index]
        data = Sub(whole, 0, 4)
    else:
        data = None
    if data is None:
        return None
    return i, Instr(form[0], [data], [ins.uses[0]], form[1], comment=ins.comment), [j]


def merge_lds_reads(program: Program) -> Program:
    """``program`` with pairs of ``ds_read_b32`` / ``ds_read_b64`` of one address as
    ``ds_read2*`` (see the module docs)."""
    return _rewrite(_rewrite(program, "ds_read_b32", _lds_merge), "ds_read_b64", _lds_merge)


_HIGH_HALF = {"ds_write_b16": ("ds_write_b16_d16_hi", 1),
              "global_store_short": ("global_store_short_d16_hi", 1)}


def _short_readers(body: list[Instr | Label]) -> dict[VReg, list[int]]:
    """Positions reading each single VGPR, for registers only 16-bit stores read (as data);
    a register read any other way, or written twice, is left out."""
    readers: dict[VReg, list[int]] = {}
    other: set[VReg] = set()
    writes: dict[VReg, int] = {}
    for k, ins in enumerate(body):
        if not isinstance(ins, Instr):
            continue
        for d in ins.defs:
            if isinstance(d, VReg):
                writes[d] = writes.get(d, 0) + 1
        for n, op in enumerate(ins.uses):
            if not isinstance(op, VReg):
                continue
            if ins.opcode in _HIGH_HALF and n == _HIGH_HALF[ins.opcode][1]:
                readers.setdefault(op, []).append(k)
            else:
                other.add(op)
    return {r: ks for r, ks in readers.items() if r not in other and writes.get(r) == 1}


def merge_short_loads(program: Program) -> Program:
    """``program`` with runs of 16-bit global loads read only by 16-bit stores as dword
    loads (see the module docs)."""
    body = list(program.body)
    readers = _short_readers(body)
    removed: set[int] = set()
    for i, ins in enumerate(body):
        if i in removed or not isinstance(ins, Instr) or ins.opcode != "global_load_ushort":
            continue
        run = [k for k in _load_run(body, i, 2) if k not in removed]
        run = run[:len(run) - len(run) % 2]
        dsts = [body[k].defs[0] for k in run]  # type: ignore[union-attr]
        if len(run) < 2 or i not in run or not all(d in readers for d in dsts):
            continue
        words = len(run) // 2
        whole = VReg("v", words, 2 if words > 1 else 1)
        low = body[run[0]]
        assert isinstance(low, Instr)
        data: Operand = Sub(whole, 0, words) if words > 1 else whole
        body[i] = Instr(_WIDE_LOAD.get(words, "global_load_dword"), [data], list(ins.uses),
                        low.mods, comment=ins.comment)
        removed.update(k for k in run if k != i)
        for half, dst in enumerate(dsts):
            word: Operand = Sub(whole, half // 2) if words > 1 else whole
            for k in readers[dst]:
                user = body[k]
                assert isinstance(user, Instr)
                opcode = _HIGH_HALF[user.opcode][0] if half % 2 else user.opcode
                uses = [word if op is dst else op for op in user.uses]
                body[k] = replace(user, opcode=opcode, uses=uses)
    return replace(program, body=[ins for k, ins in enumerate(body) if k not in removed])
