"""A flash-attention forward pass written with sm_80 instructions, in three sync variants.

``O = softmax(Q K^T / sqrt(D)) V`` for ``BH`` heads of ``S`` tokens of dimension ``D`` (fp16
in and out, fp32 scores and accumulators, non-causal). One block handles 128 query rows of one
head with 4 warps (32 rows each, two m16 tiles) and walks the keys in tiles of 64:

* ``Q`` goes straight from global memory into ``mma`` A fragments once per block (``Q`` and
  ``Out`` are declared as ``uint32`` pairs of fp16; ``Out`` is stored one ``half2`` at a time);
* each 64x64 tile of ``K`` and of ``V`` goes global -> shared with ``cp.async.cg``, XOR-swizzled
  (16-byte chunk ``c`` of row ``r`` at chunk ``c ^ (r % 8)``);
* ``S = Q K^T`` with ``ldmatrix.x4`` + ``mma.sync.m16n8k16``; the online softmax keeps each
  row's running max and sum (quad reductions with ``__shfl_xor_sync``); ``P`` is packed into
  fp16 A fragments with ``cvt.rn.f16x2.f32``; ``O += P V`` reads ``V`` with
  ``ldmatrix.x4.trans``.

Variants (functions returning a ``PrimFunc``): :func:`hand` (3-stage ``cp.async`` pipeline,
one ``wait_group 1`` + ``__syncthreads()`` per key tile), :func:`stripped` (no barrier, wait
or commit) and :func:`plain` (one shared stage, no pipelining, no synchronisation).
Needs TVM (the kernels are TVMScript).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# the examples folder is not a package: its helper module is imported by path
from real_kernel_variants import KernelFamily, standard_variants, strip_sync
from sm80_fragments import ldmatrix_x4, ldmatrix_x4_trans, mma_m16n8k16

BH, SEQ, DIM = 64, 2048, 64  #: the benchmarked problem (batch x heads, tokens, head dim)
SMALL = (2, 256, DIM)  #: (BH, S, D) of the race-check run
BLOCK_M = 128  # query rows per block
BLOCK_N = 64  # keys per tile
WARPS = 4  # 32 query rows each
THREADS = 32 * WARPS
STAGES = 3
CHUNKS = DIM // 8  # 16-byte chunks per shared row
COPIES = BLOCK_N * CHUNKS // THREADS  # cp.async per thread per tile (of K, and of V)
#: exponent scale: softmax(x / sqrt(D)) computed with exp2
SCALE_LOG2 = 1.0 / math.sqrt(DIM) * math.log2(math.e)
FULL_MASK = 0xFFFFFFFF  # every lane of the warp takes part in the shuffles
NEG_BIG = -1.0e30  # running max before the first tile (finite: exp2(-big - m) is 0, not NaN)


def _kernel(bh: int, seq: int, mode: str):
    """The attention kernel for ``bh`` heads of ``seq`` tokens; ``mode``: hand or plain."""
    from tvm.script import tirx as T

    n_tiles = seq // BLOCK_N
    q_blocks = seq // BLOCK_M
    pipelined = mode == "hand"
    stages = STAGES if pipelined else 1
    prefetch = STAGES - 1

    @T.macro(hygienic=False)
    def load_kv(stage, j):
        for i in T.unroll(COPIES):
            row: T.let[T.int32] = i * (THREADS // CHUNKS) + tx // CHUNKS
            chunk: T.let[T.int32] = tx % CHUNKS
            col: T.let[T.int32] = (chunk ^ (row % 8)) * 8
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(Ks[stage, row, col]),
                T.address_of(K[head, j * BLOCK_N + row, chunk * 8]),
                16,
            )
            T.ptx["cp.async.cg.shared.global"](
                T.address_of(Vs[stage, row, col]),
                T.address_of(V[head, j * BLOCK_N + row, chunk * 8]),
                16,
            )

    @T.macro(hygienic=False)
    def attend(stage):
        # S = Q K^T for the warp's 32 rows x 64 keys.
        for i in T.unroll(64):
            sacc[i] = T.float32(0)
        for kd in T.unroll(DIM // 16):
            for nj in T.unroll(4):
                row: T.let[T.int32] = nj * 16 + (lane // 16) * 8 + lane % 8
                chunk: T.let[T.int32] = kd * 2 + (lane // 8) % 2
                col: T.let[T.int32] = (chunk ^ (row % 8)) * 8
                ldmatrix_x4(kf, nj * 4, T.address_of(Ks[stage, row, col]))
            for mt in T.unroll(2):
                for nt in T.unroll(8):
                    mma_m16n8k16(sacc, (mt * 8 + nt) * 4, qf, (mt * 4 + kd) * 4, kf, nt * 2)
        # Online softmax; row r = mt * 2 + h is row g (h = 0) or g + 8 (h = 1) of m-tile mt.
        for r in T.unroll(4):
            stat[0] = rowmax[r]
            for nt in T.unroll(8):
                for e in T.unroll(2):
                    stat[0] = T.max(
                        stat[0],
                        sacc[((r // 2) * 8 + nt) * 4 + (r % 2) * 2 + e] * T.float32(SCALE_LOG2),
                    )
            stat[0] = T.max(stat[0], T.cuda.__shfl_xor_sync(T.uint32(FULL_MASK), stat[0], 1, 32))
            stat[0] = T.max(stat[0], T.cuda.__shfl_xor_sync(T.uint32(FULL_MASK), stat[0], 2, 32))
            stat[1] = T.exp2(rowmax[r] - stat[0])
            rowmax[r] = stat[0]
            rowsum[r] = rowsum[r] * stat[1]
            for dn in T.unroll(8):
                for e in T.unroll(2):
                    oacc[((r // 2) * 8 + dn) * 4 + (r % 2) * 2 + e] = (
                        oacc[((r // 2) * 8 + dn) * 4 + (r % 2) * 2 + e] * stat[1]
                    )
            for nt in T.unroll(8):
                for e in T.unroll(2):
                    sacc[((r // 2) * 8 + nt) * 4 + (r % 2) * 2 + e] = T.exp2(
                        sacc[((r // 2) * 8 + nt) * 4 + (r % 2) * 2 + e] * T.float32(SCALE_LOG2)
                        - stat[0]
                    )
                    rowsum[r] = rowsum[r] + sacc[((r // 2) * 8 + nt) * 4 + (r % 2) * 2 + e]
        # P as fp16 A fragments: keys 16kk..16kk+15 are score tiles 2kk and 2kk+1.
        for mt in T.unroll(2):
            for kk in T.unroll(4):
                for q in T.unroll(4):
                    # a0: tile 2kk rows g; a1: tile 2kk rows g+8; a2, a3: tile 2kk+1.
                    T.ptx["cvt.rn.f16x2.f32"](
                        pf[(mt * 4 + kk) * 4 + q],
                        sacc[(mt * 8 + kk * 2 + q // 2) * 4 + (q % 2) * 2 + 1],
                        sacc[(mt * 8 + kk * 2 + q // 2) * 4 + (q % 2) * 2],
                    )
        # O += P V; V (keys x dims, row-major) read transposed as the k x n operand.
        for kk in T.unroll(BLOCK_N // 16):
            for dp in T.unroll(4):
                row: T.let[T.int32] = kk * 16 + ((lane // 8) % 2) * 8 + lane % 8
                chunk: T.let[T.int32] = dp * 2 + lane // 16
                col: T.let[T.int32] = (chunk ^ (row % 8)) * 8
                ldmatrix_x4_trans(vf, dp * 4, T.address_of(Vs[stage, row, col]))
            for mt in T.unroll(2):
                for dn in T.unroll(8):
                    mma_m16n8k16(oacc, (mt * 8 + dn) * 4, pf, (mt * 4 + kk) * 4, vf, dn * 2)

    @T.macro(hygienic=False)
    def prologue():
        # Q fragments of the warp's two m16 tiles, for the four 16-wide slices of D.
        for mt in T.unroll(2):
            for kd in T.unroll(DIM // 16):
                for q in T.unroll(4):
                    qf[(mt * 4 + kd) * 4 + q] = Q[
                        head,
                        q0 + warp * 32 + mt * 16 + lane // 4 + (q % 2) * 8,
                        kd * 8 + (q // 2) * 4 + lane % 4,
                    ]
        for i in T.unroll(64):
            oacc[i] = T.float32(0)
        for r in T.unroll(4):
            rowmax[r] = T.float32(NEG_BIG)
            rowsum[r] = T.float32(0)

    @T.macro(hygienic=False)
    def epilogue():
        for r in T.unroll(4):
            stat[0] = rowsum[r]
            stat[0] = stat[0] + T.cuda.__shfl_xor_sync(T.uint32(FULL_MASK), stat[0], 1, 32)
            stat[0] = stat[0] + T.cuda.__shfl_xor_sync(T.uint32(FULL_MASK), stat[0], 2, 32)
            stat[1] = T.float32(1) / stat[0]
            for dn in T.unroll(8):
                # two adjacent output columns leave as one packed half2 word
                T.ptx["cvt.rn.f16x2.f32"](
                    pf[0],
                    oacc[((r // 2) * 8 + dn) * 4 + (r % 2) * 2 + 1] * stat[1],
                    oacc[((r // 2) * 8 + dn) * 4 + (r % 2) * 2] * stat[1],
                )
                Out[
                    head,
                    q0 + warp * 32 + (r // 2) * 16 + lane // 4 + (r % 2) * 8,
                    dn * 4 + lane % 4,
                ] = pf[0]

    @T.prim_func
    def sm80_flash_attention(
        Q: T.Buffer((bh, seq, DIM // 2), "uint32"),
        K: T.Buffer((bh, seq, DIM), "float16"),
        V: T.Buffer((bh, seq, DIM), "float16"),
        Out: T.Buffer((bh, seq, DIM // 2), "uint32"),
    ):
        for bx in T.thread_binding(bh * q_blocks, thread="blockIdx.x"):
            for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
                Ks = T.alloc_buffer((stages, BLOCK_N, DIM), "float16", scope="shared")
                Vs = T.alloc_buffer((stages, BLOCK_N, DIM), "float16", scope="shared")
                qf = T.alloc_buffer((32,), "uint32", scope="local")
                kf = T.alloc_buffer((16,), "uint32", scope="local")
                vf = T.alloc_buffer((16,), "uint32", scope="local")
                pf = T.alloc_buffer((32,), "uint32", scope="local")
                sacc = T.alloc_buffer((64,), "float32", scope="local")
                oacc = T.alloc_buffer((64,), "float32", scope="local")
                rowmax = T.alloc_buffer((4,), "float32", scope="local")
                rowsum = T.alloc_buffer((4,), "float32", scope="local")
                stat = T.alloc_buffer((2,), "float32", scope="local")
                head: T.let[T.int32] = bx // q_blocks
                q0: T.let[T.int32] = bx % q_blocks * BLOCK_M
                warp: T.let[T.int32] = tx // 32
                lane: T.let[T.int32] = tx % 32
                prologue()
                if pipelined:  # decided when the kernel is parsed
                    for s in T.unroll(prefetch):
                        load_kv(s, s)
                        T.ptx["cp.async.commit_group"]()
                    for j in range(n_tiles):
                        # Tile j has landed once at most the newest (j + 1) group is open.
                        T.ptx["cp.async.wait_group"](STAGES - 2)
                        # Everyone's copies of tile j are visible; everyone is done with tile
                        # j - 1, whose stage the prefetch below overwrites.
                        T.tvm_storage_sync("shared")
                        if j + prefetch < n_tiles:
                            load_kv((j + prefetch) % STAGES, j + prefetch)
                        T.ptx["cp.async.commit_group"]()
                        attend(j % STAGES)
                else:
                    for j in range(n_tiles):
                        load_kv(0, j)
                        attend(0)
                epilogue()

    return sm80_flash_attention


def hand(bh: int = BH, seq: int = SEQ):
    """The hand-synchronised 3-stage pipeline (``wait_group 1`` + one barrier per key tile)."""
    return _kernel(bh, seq, "hand")


def stripped(bh: int = BH, seq: int = SEQ):
    """:func:`hand` without any barrier, ``wait_group`` or ``commit_group``."""
    return strip_sync(hand(bh, seq))


def plain(bh: int = BH, seq: int = SEQ):
    """One shared stage, no pipelining, no synchronisation (for tilewave's multibuffer)."""
    return _kernel(bh, seq, "plain")


def family(bh: int = BH, seq: int = SEQ) -> KernelFamily:
    """The benchmark's description of this attention forward for ``bh`` heads x ``seq``."""
    return KernelFamily(
        name="sm80_flash_attention",
        problem={"kind": "attention", "bh": bh, "seq": seq, "dim": DIM, "dtype": "float16"},
        grid=(bh * (seq // BLOCK_M), 1, 1),
        block=(THREADS, 1, 1),
        flops=4.0 * bh * seq * seq * DIM,
        variants=standard_variants(lambda: hand(bh, seq), lambda: plain(bh, seq)),
    )


def bench_families(small: bool = False) -> list[KernelFamily]:
    """The families the benchmark emits (the race-check size when ``small``)."""
    return [family(SMALL[0], SMALL[1])] if small else [family()]


__all__ = ["bench_families", "family", "hand", "plain", "stripped"]
