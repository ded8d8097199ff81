"""copy_region: the elements an async copy writes, checked against brute force."""

from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import ir, tirx
from tvm.script import from_source
from tvm.script import tirx as T
from tvm.sym.analyzer import Analyzer

import tilewave  # noqa: F401 - registers T.tilewave.*
from tilewave.analysis.copy_regions import copy_region
from tilewave.ir.walker import post_order_visit, substitute

DTYPES = {"int8": 1, "float16": 2, "float32": 4, "float64": 8}


def _copy_call(func):
    found = []

    def check(node):
        if isinstance(node, tirx.Evaluate) and isinstance(node.value, ir.expr.Call):
            found.append(node.value)

    post_order_visit(func.body, check)
    (call,) = found
    return call


def _buffer(func):
    found = []

    def check(node):
        if isinstance(node, tirx.AllocBuffer):
            found.append(node.buffer)

    post_order_visit(func.body, check)
    return found[0]


def _kernel(shape, dtype, address, op_call):
    return f'''
# from tvm.script import tirx as T
@T.prim_func
def k(A: T.Buffer((4096,), "int8")):
    for tx in T.thread_binding(1, thread="threadIdx.x"):
        S = T.alloc_buffer({shape}, "{dtype}", scope="shared")
        {op_call.format(dst=address)}
'''


OPS = {
    "ca": ("T.ptx.cp.async_.ca.shared.global_({dst}, T.address_of(A[0]), {size})", (4, 8, 16)),
    "cg": ("T.ptx.cp.async_.cg.shared.global_({dst}, T.address_of(A[0]), {size})", (16,)),
}


@st.composite
def copies(draw):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    total = 1
    for ext in shape:
        total *= ext
    op = draw(st.sampled_from(sorted(OPS)))
    template, sizes = OPS[op]
    size = draw(st.sampled_from(sizes))
    flat_start = draw(st.integers(0, total - 1))
    if draw(st.booleans()):
        index, rest = [], flat_start
        for ext in reversed(shape):
            index.append(rest % ext)
            rest //= ext
        address = f"T.address_of(S[{', '.join(map(str, reversed(index)))}])"
    else:
        address = f'T.tvm_access_ptr(T.type_annotation("{dtype}"), S.data, {flat_start}, 1, 2)'
    call = template.replace("{size}", str(size))
    return _kernel(shape, dtype, address, call), dtype, shape, flat_start, size


def _flat(shape, index):
    out = 0
    for ext, i in zip(shape, index, strict=True):
        out = out * ext + i
    return out


@settings(max_examples=150, deadline=None)
@given(case=copies())
def test_region_contains_every_element_written(case):
    source, dtype, shape, flat_start, size = case
    func = from_source(source, extra_vars={"T": T})
    region = copy_region(_copy_call(func), _buffer(func))
    assert region is not None, source
    indices, var, count = region
    an = Analyzer()
    covered = set()
    for value in range(count):
        point = [an.simplify(substitute(i, {var: tirx.IntImm("int32", value)})) for i in indices]
        covered.add(_flat(shape, [int(p.value) for p in point]))
    width = DTYPES[dtype]
    start_byte = flat_start * width
    written = {e for e in range(flat_start, flat_start + size) if e * width < start_byte + size}
    assert written <= covered, source  # sound: never narrower than what is written
    assert covered == written, source  # and exact for these constant cases


@T.prim_func
def variable_size(A: T.Buffer((64,), "float32"), n: T.uint32):
    for _tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        M = T.alloc_buffer((1,), "uint64", scope="shared")
        T.ptx.cp.async_.bulk.shared__cta.global_.mbarrier__complete_tx__bytes(
            T.address_of(S[0]), T.address_of(A[0]), n, T.address_of(M[0])
        )


@T.prim_func
def constant_bulk(A: T.Buffer((64,), "float32")):
    for _tx in T.thread_binding(32, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        M = T.alloc_buffer((1,), "uint64", scope="shared")
        T.ptx.cp.async_.bulk.shared__cta.global_.mbarrier__complete_tx__bytes(
            T.address_of(S[16]), T.address_of(A[0]), T.uint32(64), T.address_of(M[0])
        )


def test_bulk_copy_with_a_constant_size_is_a_region_and_its_mbarrier_is_not():
    call = _copy_call(constant_bulk)
    indices, var, count = copy_region(call, _buffer(constant_bulk))
    assert count == 16 and str(indices[0]) == f"16 + {var.name}"
    mbar = next(b for b in _all_buffers(constant_bulk) if str(b.name) == "M")
    assert copy_region(call, mbar) is None


def test_a_byte_count_that_is_not_constant_means_the_whole_buffer():
    assert copy_region(_copy_call(variable_size), _buffer(variable_size)) is None


def _all_buffers(func):
    found = []
    post_order_visit(
        func.body, lambda n: found.append(n.buffer) if isinstance(n, tirx.AllocBuffer) else None
    )
    return found
