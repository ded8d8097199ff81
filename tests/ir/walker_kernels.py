"""TVMScript kernels covering the statement and expression kinds the walker must handle."""

from tvm.script import tirx as T


@T.prim_func
def every_node_kind(A: T.Buffer((128,), "float32"), B: T.Buffer((128,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((128,), "float32", scope="shared")
            C = T.decl_buffer((128,), "float32", data=S.data, scope="shared")
            S[tx] = A[bx * 64 + tx]
            T.tvm_storage_sync("shared")
            with T.attr(0, "pragma_tilewave_test", 1):
                B[tx] = T.Cast("float32", T.Cast("int32", C[63 - tx])) + T.float32(1)
            if tx < 4:
                n = T.bind(tx * 2 + 1)
                B[n] = T.Select(tx == 0, S[n], T.float32(0))
            else:
                B[tx] = T.float32(0)
            i = T.alloc_buffer((1,), "int32", scope="local")
            i[0] = 0
            while i[0] < 3:
                i[0] = i[0] + 1
            for k in T.serial(1, 9, step=2):
                S[k] = T.max(S[k], T.min(T.float32(0), S[k + 1])) * T.float32(2) - S[0]
            for u in T.unroll(4):
                S[u] = T.float32(
                    T.floordiv(u, 2) + T.floormod(tx, 3) + tx % 3 // 2
                    - T.truncdiv(tx, 2) + T.truncmod(tx, 5)
                )
            B[T.ramp(tx * 0, 1, 4)] = T.broadcast(S[tx], 4)
            T.evaluate(T.address_of(S[tx]))
            T.evaluate(
                T.call_extern(
                    "void", "tilewave_test_extern", S.data, tx & 1, tx | 2, tx ^ 3, tx << 1, tx >> 1
                )
            )
            T.evaluate((tx != 1 and tx >= 0) or not tx <= 5)
