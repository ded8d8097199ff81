"""Property test of the uniformity analysis against evaluation.

Random integer/boolean expressions over ``blockIdx.x``, ``threadIdx.x``/``threadIdx.y``, two
kernel scalars ``n``, ``m`` and loads ``C[e % 16]`` of a buffer the kernel never writes are
put in an ``if`` of a kernel (with a random block shape and, sometimes, a premise
``assert n % K == 0``). Whenever the analysis says BLOCK, the expression, evaluated here in
Python for every thread of a block, has one value for every sampled ``(bx, n, m, C)`` that
satisfies the premise; WARP: one value per 32 consecutive threads. The evaluator below is
independent of tilewave (plain Python integers, floor division as TIR's
``floordiv``/``floormod``).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import tirx
from tvm.script import tirx as T

from tilewave.analysis.uniformity import Uniformity, UniformityAnalysis
from tilewave.ir.walker import rebuild

WARP = 32


@T.prim_func
def template(A: T.Buffer((8,), "float32"), C: T.Buffer((16,), "int32"), n: T.int32, m: T.int32):
    assert n % 64 == 0, "replaced by the example's premise"
    for bx in T.thread_binding(8, thread="blockIdx.x"):
        for ty in T.thread_binding(1, thread="threadIdx.y"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                if bx + ty + tx + n + m > 0:  # replaced by the example's condition
                    A[0] = 0.0


# -- expressions as Python trees: ("bx",), ("c", 5), ("+", a, b), ("*", a, 3), ("//", a, 4),
#    ("%", a, 4), ("C", a) (C[a % 16]), ("<", a, b), ..., ("and", p, q), ("or", p, q), ("not", p)
LEAVES = st.sampled_from([("bx",), ("tx",), ("ty",), ("n",), ("m",)]) | st.builds(
    lambda c: ("c", c), st.integers(-70, 70)
)


def _int_expr(children):
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-"]), children, children),
        st.tuples(st.just("*"), children, st.integers(-3, 3)),
        st.tuples(st.sampled_from(["//", "%"]), children, st.sampled_from([1, 2, 4, 8, 16, 32,
                                                                           48, 64, 128])),
        st.tuples(st.just("C"), children),
    )


INT_EXPRS = st.recursive(LEAVES, _int_expr, max_leaves=6)
COMPARISONS = st.tuples(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), INT_EXPRS, INT_EXPRS)
CONDITIONS = st.recursive(
    COMPARISONS,
    lambda p: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), p, p), st.tuples(st.just("not"), p)
    ),
    max_leaves=3,
)

_BINARY = {
    "+": tirx.Add, "-": tirx.Sub, "<": tirx.LT, "<=": tirx.LE, ">": tirx.GT, ">=": tirx.GE,
    "==": tirx.EQ, "!=": tirx.NE, "and": tirx.And, "or": tirx.Or,
}
_PY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
}


def to_tir(tree, env):
    op = tree[0]
    if len(tree) == 1:  # bx, tx, ty, n, m
        return env[op]
    if op == "c":
        return tirx.IntImm("int32", tree[1])
    if op == "not":
        return tirx.Not(to_tir(tree[1], env))
    if op == "C":
        index = tirx.FloorMod(to_tir(tree[1], env), tirx.IntImm("int32", 16))
        return tirx.BufferLoad(env["C"], [index])
    if op == "*":
        return tirx.Mul(to_tir(tree[1], env), tirx.IntImm("int32", tree[2]))
    if op == "//":
        return tirx.FloorDiv(to_tir(tree[1], env), tirx.IntImm("int32", tree[2]))
    if op == "%":
        return tirx.FloorMod(to_tir(tree[1], env), tirx.IntImm("int32", tree[2]))
    return _BINARY[op](to_tir(tree[1], env), to_tir(tree[2], env))


def evaluate(tree, values):
    op = tree[0]
    if len(tree) == 1:
        return values[op]
    if op == "c":
        return tree[1]
    if op == "not":
        return not evaluate(tree[1], values)
    if op == "C":
        return values["C"][evaluate(tree[1], values) % 16]
    if op == "*":
        return evaluate(tree[1], values) * tree[2]
    if op == "//":
        return evaluate(tree[1], values) // tree[2]
    if op == "%":
        return evaluate(tree[1], values) % tree[2]
    return _PY[op](evaluate(tree[1], values), evaluate(tree[2], values))


def kernel(tree, premise, tx_extent, ty_extent):
    """The template with the example's condition, premise and block shape."""
    assert_stmt, blocks = template.body.seq
    ty_loop = blocks.body
    tx_loop = ty_loop.body
    if_stmt = tx_loop.body
    env = {"bx": blocks.loop_var, "ty": ty_loop.loop_var, "tx": tx_loop.loop_var,
           "C": template.params[1], "n": template.params[2], "m": template.params[3]}
    if_stmt = rebuild(if_stmt, {"condition": to_tir(tree, env)})
    tx_loop = rebuild(tx_loop, {"body": if_stmt, "extent": tirx.IntImm("int32", tx_extent)})
    ty_loop = rebuild(ty_loop, {"body": tx_loop, "extent": tirx.IntImm("int32", ty_extent)})
    n = env["n"]
    cond = (
        tirx.EQ(tirx.FloorMod(n, tirx.IntImm("int32", premise)), tirx.IntImm("int32", 0))
        if premise else tirx.const(True, "bool")
    )
    body = tirx.SeqStmt([rebuild(assert_stmt, {"condition": cond}),
                         rebuild(blocks, {"body": ty_loop})])
    return template.with_body(body), if_stmt.condition


def samples(premise, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(40):
        n = rng.randint(-6, 8) * premise if premise else rng.randint(-200, 400)
        contents = [rng.randint(-3, 3) for _ in range(16)]
        out.append({"bx": rng.randint(0, 7), "n": n, "m": rng.randint(-200, 400), "C": contents})
    return out


#: one generated example: a condition, a premise modulus (0: none), the block shape, a seed
EXAMPLES = {
    "tree": CONDITIONS,
    "premise": st.sampled_from([0, 16, 32, 64, 128]),
    "tx_extent": st.sampled_from([32, 48, 64, 128]),
    "ty_extent": st.sampled_from([1, 2]),
    "seed": st.integers(0, 2**16),
}


def check_one_value(tree, premise, tx_extent, ty_extent, seed, level):
    """Evaluate ``tree`` for every thread at sampled ``(bx, n, m)`` meeting the premise:
    one value per block (BLOCK) or per 32 consecutive threads (WARP)."""
    threads = [(tx, ty) for ty in range(ty_extent) for tx in range(tx_extent)]  # linear order
    group = len(threads) if level is Uniformity.BLOCK else WARP
    assert len(threads) % group == 0, tree
    for point in samples(premise, seed):
        values = [evaluate(tree, {**point, "tx": tx, "ty": ty}) for tx, ty in threads]
        for start in range(0, len(values), group):
            assert len(set(values[start : start + group])) == 1, (tree, point, start)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**EXAMPLES)
def test_uniform_means_one_value_per_block_or_warp(tree, premise, tx_extent, ty_extent, seed):
    func, cond = kernel(tree, premise, tx_extent, ty_extent)
    level = UniformityAnalysis(func).level(cond)
    if level is not Uniformity.THREAD:
        check_one_value(tree, premise, tx_extent, ty_extent, seed, level)


def test_the_property_sees_uniform_mixed_conditions():
    """The generator's space holds the interesting case: a thread index mixed with uniform
    values, proved uniform by a premise (so the property above is not vacuous there)."""
    tree = ("<", ("+", ("*", ("bx",), 64), ("tx",)), ("n",))
    func, cond = kernel(tree, 64, 64, 1)
    assert UniformityAnalysis(func).level(cond) is Uniformity.BLOCK
    func, cond = kernel(tree, 32, 64, 1)
    assert UniformityAnalysis(func).level(cond) is Uniformity.WARP
    func, cond = kernel(tree, 0, 64, 1)
    assert UniformityAnalysis(func).level(cond) is Uniformity.THREAD
