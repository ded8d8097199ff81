"""``tilewave racecheck FILE --target T``: the report, and exit status 1 on an error."""

import io
import textwrap

from tilewave.cli import main

KERNELS = textwrap.dedent('''
    from tvm.script import tirx as T
    import tilewave

    @T.prim_func
    def racy(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S = T.alloc_buffer((64,), "float32", scope="shared")
            S[tx] = A[tx]
            B[tx] = S[63 - tx]
''')


def run(tmp_path, *extra):
    path = tmp_path / "kernel.py"
    path.write_text(KERNELS)
    out = io.StringIO()
    status = main(["racecheck", str(path), "--target", "sm_90a", *extra], out=out)
    return status, out.getvalue()


def test_racy_kernel_reports_and_fails(tmp_path):
    status, text = run(tmp_path, "--schedule", "lockstep")
    assert status == 1
    assert "racecheck racy (sm_90a): 1 error(s)" in text
    assert "[RAW] read after an unordered write on shared 'S'" in text
    assert "first: S[tx] = A[tx]" in text and "then : B[tx] = S[63 - tx]" in text


def test_lowered_kernel_is_clean(tmp_path):
    status, text = run(tmp_path, "--lower")
    assert status == 0, text
    assert "racecheck racy_kernel (sm_90a): clean" in text
