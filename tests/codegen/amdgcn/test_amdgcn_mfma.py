"""MFMA: the simulator's operand layout against TVM's ROCm tensor intrinsics, the hazard
wait states against what LLVM's hazard recognizer inserts, the accumulator chain, and the
selector's error messages."""

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from tvm.s_tir.tensor_intrin import rocm as tvm_rocm
from tvm.script import tirx as T

import tilewave
from tilewave.codegen import amdgcn
from tilewave.codegen.amdgcn.hazards import HAZARD_RULES
from tilewave.errors import MalformedKernelError

sys.path.insert(0, str(Path(__file__).parent))
import kernels
from isa_simulator import simulate

# A hand-written wave: lane l loads 8 bytes of A and of B at l*8, one MFMA from C = 0,
# 16 bytes of D stored at l*16. What lands where is decided by the host packing below.
_PROBE = """
.globl probe
probe:
    s_load_dwordx2 s[4:5], s[0:1], 0
    s_load_dwordx2 s[8:9], s[0:1], 8
    s_load_dwordx2 s[12:13], s[0:1], 16
    s_mov_b32 s6, 512
    s_mov_b32 s7, 0x20000
    s_mov_b32 s10, 512
    s_mov_b32 s11, 0x20000
    s_mov_b32 s14, 1024
    s_mov_b32 s15, 0x20000
    v_lshlrev_b32 v1, 3, v0
    v_lshlrev_b32 v2, 4, v0
    s_waitcnt lgkmcnt(0)
    buffer_load_dwordx2 v[4:5], v1, s[4:7], 0 offen offset:0
    buffer_load_dwordx2 v[6:7], v1, s[8:11], 0 offen offset:0
    s_waitcnt vmcnt(0)
    OPCODE v[8:11], v[4:5], v[6:7], 0
    s_nop 7
    buffer_store_dwordx4 v[8:11], v2, s[12:15], 0 offen offset:0
    s_endpgm
.size probe, .-probe
.amdhsa_kernel probe
  .amdhsa_kernarg_size 24
.end_amdhsa_kernel
"""


@pytest.mark.parametrize("opcode,dtype", [("v_mfma_f32_16x16x16_f16", np.float16),
                                          ("v_mfma_f32_16x16x16_bf16", ml_dtypes.bfloat16)])
def test_simulator_mfma_layout_is_tvm_rocm_tensor_intrinsic_layout(opcode, dtype):
    """TVM's MFMA tensor intrinsics (tvm/s_tir/tensor_intrin/rocm.py) state which lane and
    element hold A[i][k], B[k][j] and C[i][j]; pack by those maps, run the simulator's
    MFMA, unpack by them: the product must be A @ B."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((16, 16)).astype(dtype)
    b = rng.standard_normal((16, 16)).astype(dtype)
    a_lanes = np.zeros((64, 4), dtype)
    b_lanes = np.zeros((64, 4), dtype)
    for lane in range(64):
        for item in range(4):
            a_lanes[lane, item] = a[tvm_rocm.thread_id_shared_access_64x4_to_16x16_layout_A(
                lane, item)]
            b_lanes[lane, item] = b[tvm_rocm.thread_id_shared_access_64x4_to_16x16_layout_B(
                lane, item)]
    d_lanes = np.zeros((64, 4), np.float32)
    simulate(_PROBE.replace("OPCODE", opcode), [a_lanes, b_lanes, d_lanes], (1, 1, 1),
             (64, 1, 1))
    d = np.zeros((16, 16), np.float32)
    for lane in range(64):
        for item in range(4):
            d[tvm_rocm.thread_id_shared_access_64x4_to_16x16_layout_C(lane, item)] = \
                d_lanes[lane, item]
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(d, expected, rtol=1e-5, atol=1e-5)


# -- hazard wait states: what LLVM inserts for the same kernels ----------------------------
@T.prim_func
def valu_then_mfma(A: T.Buffer((16, 16), "float16"), BT: T.Buffer((16, 16), "float16"),
                   C: T.Buffer((16, 16), "float32")):
    for _bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            acc = T.alloc_buffer((4,), "float32", scope="local")
            acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
                "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16",
                A[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)] * T.Broadcast(T.float16(3), 4),
                BT[tx % 16, T.Ramp(tx // 16 * 4, 1, 4)],
                T.Broadcast(T.float32(0), 4), 0, 0, 0)
            for r in T.unroll(4):
                C[tx // 16 * 4 + r, tx % 16] = acc[r] * T.float32(3)


_REG = re.compile(r"\bv(?:(\d+)|\[(\d+):(\d+)\])")


def _regs(text: str) -> set[int]:
    out: set[int] = set()
    for m in _REG.finditer(text):
        lo, hi = (int(m.group(1)),) * 2 if m.group(1) else (int(m.group(2)), int(m.group(3)))
        out.update(range(lo, hi + 1))
    return out


def _llvm_instructions(func, target: str) -> list[tuple[str, str, str]]:
    """(opcode, first operand, other operands) of LLVM's code for ``func``."""
    out = []
    for line in tilewave.build(func, target).source.splitlines():
        text = line.split(";")[0].strip()
        if not text or text.startswith(".") or text.endswith(":"):
            continue
        opcode, _, rest = text.partition(" ")
        first, _, others = rest.partition(",")
        out.append((opcode, first, others))
    return out


def _wait_states(instrs) -> int:
    return sum(int(ops) + 1 if op == "s_nop" else 1 for op, ops, _ in instrs)


def _rule(name: str) -> int:
    return next(r.wait_states for r in HAZARD_RULES if r.name == name)


@pytest.mark.parametrize("target,result_read", [("gfx942", 7), ("gfx950", 8)])
def test_mfma_wait_states_are_those_llvm_inserts(target, result_read):
    code = _llvm_instructions(valu_then_mfma, target)
    at = next(i for i, (op, _, _) in enumerate(code) if op.startswith("v_mfma"))
    # VALU write -> MFMA read: LLVM pads the gap to exactly the requirement with s_nop
    srcs = _regs(code[at][2].rsplit(",", 1)[0])
    producer = max(i for i in range(at) if code[i][0].startswith("v_")
                   and _regs(code[i][1]) & srcs)
    assert code[at - 1][0] == "s_nop"
    assert _wait_states(code[producer + 1:at]) == 2 == _rule("valu-write-vgpr-mfma-read")
    # MFMA result -> VALU read
    dst = _regs(code[at][1])
    consumer = next(i for i in range(at + 1, len(code)) if _regs(code[i][2]) & dst)
    assert code[consumer - 1][0] == "s_nop"
    assert _wait_states(code[at + 1:consumer]) == result_read
    assert _rule("mfma-result-read") == 8  # one table for both targets: gfx950's count


def test_llvm_chains_the_accumulator_of_the_same_gemm_without_nops():
    code = _llvm_instructions(kernels.gemm_f16, "gfx942")
    mfmas = [i for i, (op, _, _) in enumerate(code) if op.startswith("v_mfma")]
    assert len(mfmas) == 4
    between = [op for i in range(mfmas[0], mfmas[-1]) for op, _, _ in [code[i]]]
    assert "s_nop" not in between


# -- what the selector makes of the GEMM kernels -------------------------------------------
def _body(func, target="gfx942"):
    asm = amdgcn.compile_device_func(amdgcn.device_function(func, target), target).asm
    return asm.split(".size")[0]


def test_k_loop_chains_the_accumulator_in_place():
    # the 4-step K loop is unrolled: four MFMAs, each with D = C in one register range
    body = _body(kernels.gemm_f16)
    steps = body.split("v_mfma_f32_16x16x16_f16", 1)[1]
    mfma = re.findall(r"v_mfma_f32_16x16x16_f16 (v\[\d+:\d+\]), v\[\d+:\d+\], v\[\d+:\d+\], "
                      r"(v\[\d+:\d+\])", body)
    assert len(mfma) == 4 and all(d == c == mfma[0][0] for d, c in mfma)  # no copies
    acc = _regs(mfma[0][0])
    assert not any(_regs(ln.split(",")[0]) & acc for ln in steps.splitlines()
                   if "v_mfma" not in ln and ln.strip().startswith("v_")
                   and "v_cvt" not in ln and "buffer" not in ln)


def test_first_step_uses_an_inline_zero_accumulator():
    body = _body(kernels.gemm_bf16)
    assert re.search(r"v_mfma_f32_16x16x16_bf16 v\[\d+:\d+\], v\[\d+:\d+\], v\[\d+:\d+\], 0\b",
                     body)


def test_lds_fragments_are_8_byte_ds_reads():
    body = _body(kernels.gemm_lds_f16)  # 4 unrolled K steps, A and B fragments each
    # 8 fragments of 8 bytes; merge_access pairs those a ds_read2_b64 can address
    reads = re.findall(r"(ds_read2?(?:st64)?_b64) v\[(\d+):(\d+)\]", body)
    assert sum(2 if op.startswith("ds_read2") else 1 for op, _, _ in reads) == 8
    assert all(int(hi) - int(lo) + 1 == (4 if op.startswith("ds_read2") else 2)
               for op, lo, hi in reads)
    assert "s_barrier" in body


def test_gemm_builds_through_tvms_llvm_rocm_backend_too():
    assert "v_mfma_f32_16x16x16_f16" in tilewave.build(kernels.gemm_f16, "gfx942").source


# -- errors ---------------------------------------------------------------------------------
@T.prim_func
def misaligned_acc(A: T.Buffer((64, 16), "float16"), C: T.Buffer((64, 8), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((8,), "float32", scope="local")
        acc[T.Ramp(0, 1, 4)] = T.Broadcast(T.float32(0), 4)
        acc[T.Ramp(2, 1, 4)] = T.call_llvm_pure_intrin(
            "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16", A[tx, T.Ramp(0, 1, 4)],
            A[tx, T.Ramp(4, 1, 4)], acc[T.Ramp(2, 1, 4)], 0, 0, 0)
        C[tx, 0] = acc[0] + acc[2]


@T.prim_func
def broadcast_modifier(A: T.Buffer((64, 16), "float16"), C: T.Buffer((64, 4), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((4,), "float32", scope="local")
        acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
            "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16", A[tx, T.Ramp(0, 1, 4)],
            A[tx, T.Ramp(4, 1, 4)], acc[T.Ramp(0, 1, 4)], 1, 0, 0)
        C[tx, 0] = acc[0]


@T.prim_func
def unaligned_fragment(A: T.Buffer((64, 16), "float16"), C: T.Buffer((64, 4), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((4,), "float32", scope="local")
        acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
            "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16", A[tx, T.Ramp(1, 1, 4)],
            A[tx, T.Ramp(4, 1, 4)], acc[T.Ramp(0, 1, 4)], 0, 0, 0)
        C[tx, 0] = acc[0]


@T.prim_func
def wrong_fragment_dtype(A: T.Buffer((64, 16), "float32"), C: T.Buffer((64, 4), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        acc = T.alloc_buffer((4,), "float32", scope="local")
        acc[T.Ramp(0, 1, 4)] = T.call_llvm_pure_intrin(
            "float32x4", "llvm.amdgcn.mfma.f32.16x16x16f16", A[tx, T.Ramp(0, 1, 4)],
            A[tx, T.Ramp(4, 1, 4)], acc[T.Ramp(0, 1, 4)], 0, 0, 0)
        C[tx, 0] = acc[0]


@pytest.mark.parametrize("func,message", [
    (misaligned_acc, r"misaligned_acc_kernel.*MFMA destination 'acc' is not four float32 "
                     r"elements of a local buffer at a constant multiple of 4"),
    (broadcast_modifier, r"broadcast_modifier_kernel.*cbsz=0, abid=0, blgp=0"),
    (unaligned_fragment, r"MFMA operand A index .* is not provably a multiple of 4"),
    (wrong_fragment_dtype, r"MFMA operand A reads global float32 buffer 'A'.*"
                           r"v_mfma_f32_16x16x16_f16 takes float16 fragments"),
    (valu_then_mfma, r"MFMA operand A is not a contiguous 4-element load"),
])
def test_mfma_errors_name_the_kernel_and_the_fix(func, message):
    with pytest.raises(MalformedKernelError, match=message):
        _body(func)
