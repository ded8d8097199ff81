"""``tvm.compile(..., tir_pipeline="tilewave")`` executables, loaded by TVM and called with torch.

The executable ``tvm.compile`` returns is TVM's own (``tvm.runtime.Executable``): exported with
``export_library`` on a machine with TVM, it loads on a GPU machine with ``tvm.runtime.
load_module`` and takes torch tensors (DLPack, through ``tvm_ffi``). Two machines:

* ``python benchmarks/tvm_executable_h100.py --emit DIR [--ffi-wheel WHEEL]`` (TVM, tilewave,
  gcc; nvcc for the ``aot`` form; no GPU) compiles each case of :data:`CASES` with
  ``tvm.compile(kernel, target=sm_90a, tir_pipeline=...)`` and exports it twice:

  - ``DIR/<case>.jit.so``: what ``export_library`` gives on a machine without a CUDA driver.
    TVM's CUDA codegen then keeps the CUDA source in the library (its fallback module) and
    TVM's runtime compiles it with NVRTC when the library is loaded on the GPU machine;
  - ``DIR/<case>.aot.so``: the device code compiled here by TVM's own nvcc callback
    (``TVM_CUDA_COMPILE_MODE=nvcc``) into an sm_90a fatbin inside the library. TVM's codegen
    takes that path only when its CUDA runtime library (``libtvm_runtime_cuda.so``) is loaded,
    which needs ``libcuda.so.1``; on a machine without a driver :func:`load_cuda_runtime`
    builds a stand-in with the nine driver entry points that library links against (each
    answers "no device"; nothing is launched here).

  It also writes ``DIR/runtime/tvm_runtime.tgz`` (the installed ``tvm`` package without
  ``libtvm_compiler.so``: Python files and the runtime libraries, a few MB) and copies
  ``WHEEL``, the ``apache-tvm-ffi`` wheel for the GPU machine's Python, into ``DIR/runtime``.
* ``python benchmarks/tvm_executable_h100.py --run DIR`` (torch; no TVM needed): when ``tvm``
  does not import, unpacks ``DIR/runtime`` into a temporary folder and re-runs itself with
  ``TVM_USE_RUNTIME_LIB=1`` (TVM's runtime-only mode); loads TVM's CUDA runtime, loads each
  library with ``tvm.runtime.load_module``, calls its function with torch tensors, checks the
  result against torch and times it (median of CUDA-event timings, L2 flushed) next to torch's
  own kernel. Prints one table; exit status 1 when a case fails.

The wheel for Python 3.12 (the H100 image's) is fetched with
``pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 apache-tvm-ffi==<the installed version>``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from real_kernels_h100 import TOLERANCE, _median_ms  # noqa: E402

FORMS = ("jit", "aot")
TARGET = {"kind": "cuda", "arch": "sm_90a"}
#: The driver entry points libtvm_runtime_cuda.so links against (``nm -D --undefined-only``).
DRIVER_SYMBOLS = (
    "cuDeviceGetName", "cuFuncSetAttribute", "cuLaunchKernelEx", "cuModuleGetFunction",
    "cuModuleLoadData", "cuModuleUnload", "cuTensorMapEncodeTiled",
)  # fmt: skip
_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


@dataclass(frozen=True)
class Case:
    """One kernel compiled through ``tvm.compile``.

    Attributes:
        name: the case's (and the library's) name.
        pipeline: the ``tir_pipeline`` name.
        kernel: ``"module:attribute"``: the PrimFunc, or a function returning it, in
            ``tilewave.examples_builtin`` or ``examples/<module>.py``.
        args: ``(name, shape, dtype, role)`` per parameter, ``role`` ``"in"`` or ``"out"``.
        reference: how torch computes the output (see :func:`reference`).
        flops: floating-point operations of one call (0: not a compute benchmark).
    """

    name: str
    pipeline: str
    kernel: str
    args: tuple[tuple[str, tuple[int, ...], str, str], ...]
    reference: str
    flops: float = 0.0


_GEMM = 4096
CASES = (
    Case("block_sum", "tilewave", "tilewave.examples_builtin:block_sum",
         (("A", (4096,), "float32", "in"), ("B", (16,), "float32", "out")), "block_sum"),
    Case("sm80_gemm_stripped", "tilewave", "sm80_gemm:stripped",
         (("A", (_GEMM, _GEMM), "float16", "in"), ("B", (_GEMM, _GEMM), "float16", "in"),
          ("C", (_GEMM, _GEMM // 2), "uint32", "out")), "matmul_nt_packed", 2.0 * _GEMM**3),
    Case("tirx_transpose_stripped", "tilewave-tirx", "tirx_transpose:stripped",
         (("A", (256, 256), "float32", "in"), ("B", (256, 256), "float32", "out")),
         "transpose"),
    Case("tirx_cp_async_gemm_stripped", "tilewave-tirx", "tirx_cp_async_gemm:stripped",
         (("A", (1024, 1024), "float32", "in"), ("B", (1024, 1024), "float32", "in"),
          ("C", (1024, 1024), "float32", "out")), "matmul", 2.0 * 1024**3),
)  # fmt: skip


# --- the TVM side -------------------------------------------------------------------------------
def load_kernel(spec: str) -> Any:
    """The PrimFunc ``spec`` (``"module:attribute"``) names."""
    import importlib

    module_name, attribute = spec.split(":")
    if not module_name.startswith("tilewave."):
        sys.path.insert(0, str(REPO / "examples"))
    value = getattr(importlib.import_module(module_name), attribute)
    return value if hasattr(value, "body") else value()


def compile_case(case: Case) -> Any:
    """``tvm.compile`` of the case's kernel for sm_90a with its ``tir_pipeline``."""
    import tvm

    import tilewave  # noqa: F401 (registers the pipelines)

    target = tvm.target.Target(TARGET)
    with target:  # TVM's nvcc callback reads the arch off the current target
        return tvm.compile(load_kernel(case.kernel), target=target, tir_pipeline=case.pipeline)


def load_cuda_runtime() -> str:
    """Load TVM's CUDA runtime library, building a driver stand-in first if this machine has
    no ``libcuda.so.1``. Returns how the driver was found (``"driver"`` or ``"stand-in"``)."""
    import tvm
    from tvm.base import _LOADED_LIBS

    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        driver = "driver"
    except OSError:
        build = Path(tempfile.mkdtemp(prefix="tilewave_cuda_stub_"))
        lines = [f"int {name}(void) {{ return {_NO_DEVICE}; }}" for name in DRIVER_SYMBOLS]
        lines += [
            'int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_NO_DEVICE"; return 0; }',
            'int cuGetErrorString(int e, const char **s) { *s = "no CUDA driver"; return 0; }',
        ]
        (build / "stub.c").write_text("\n".join(lines) + "\n")
        library = build / "libcuda.so.1"
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                        str(library), str(build / "stub.c")], check=True)  # fmt: skip
        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        driver = "stand-in"
    if "tvm_runtime_cuda" not in _LOADED_LIBS:
        runtime = Path(tvm.__file__).resolve().parent / "lib" / "libtvm_runtime_cuda.so"
        _LOADED_LIBS["tvm_runtime_cuda"] = ctypes.CDLL(str(runtime))
    return driver


def device_code_kind(executable: Any) -> str:
    """``"cuda"`` when TVM compiled the device code, ``"source"`` for its fallback module."""
    device = executable.mod.imports[0]
    try:
        device.get_function("__tilewave_probe__")
    except Exception as err:  # the fallback module refuses every lookup
        if "CUDA runtime is not linked" in str(err):
            return "source"
    return device.kind


def pack_runtime(out_dir: Path, ffi_wheel: Path | None) -> Path:
    """``out_dir/tvm_runtime.tgz``: the installed ``tvm`` package without its compiler."""
    import tvm

    package = Path(tvm.__file__).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / "tvm_runtime.tgz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        skipped = info.name.endswith("libtvm_compiler.so") or "__pycache__" in info.name
        return None if skipped else info

    with tarfile.open(archive, "w:gz") as tar:
        tar.add(package, arcname="tvm", filter=keep)
    if ffi_wheel is not None:
        shutil.copy(ffi_wheel, out_dir / ffi_wheel.name)
    return archive


def emit(out_dir: Path, ffi_wheel: Path | None) -> int:
    """Export every case in both forms, the manifest and the runtime bundle."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"cases": {}}
    executables = {"jit": {case.name: compile_case(case) for case in CASES}}
    manifest["jit_device_code"] = device_code_kind(next(iter(executables["jit"].values())))
    manifest["driver"] = load_cuda_runtime()
    previous = os.environ.get("TVM_CUDA_COMPILE_MODE")
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    try:
        executables["aot"] = {case.name: compile_case(case) for case in CASES}
    finally:
        if previous is None:
            os.environ.pop("TVM_CUDA_COMPILE_MODE")
        else:
            os.environ["TVM_CUDA_COMPILE_MODE"] = previous
    manifest["aot_device_code"] = device_code_kind(next(iter(executables["aot"].values())))
    for case in CASES:
        files = {}
        for form in FORMS:
            path = out_dir / f"{case.name}.{form}.so"
            executables[form][case.name].export_library(str(path))
            files[form] = path.name
        entry = str(load_kernel(case.kernel).attrs["global_symbol"])
        manifest["cases"][case.name] = {**case.__dict__, "entry": entry, "files": files}
        print(f"{case.name:<30} {case.pipeline:<14} " + ", ".join(files.values()))
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    archive = pack_runtime(out_dir / "runtime", ffi_wheel)
    print(
        f"runtime bundle: {archive} ({archive.stat().st_size / 2**20:.1f} MiB); device code: "
        f"jit {manifest['jit_device_code']}, aot {manifest['aot_device_code']}"
    )
    return 0


# --- the GPU side (torch + TVM's runtime) ---------------------------------------------------------
def ensure_runtime(in_dir: Path, argv: list[str]) -> None:
    """Re-run this script over the runtime bundle of ``in_dir`` when ``tvm`` does not import."""
    try:
        import tvm  # noqa: F401
    except ImportError:
        if os.environ.get("TILEWAVE_TVM_RUNTIME_SITE"):
            raise
        site = Path(tempfile.mkdtemp(prefix="tilewave_tvm_runtime_"))
        bundle = in_dir / "runtime"
        with tarfile.open(bundle / "tvm_runtime.tgz") as tar:
            tar.extractall(site, filter="data")
        wheels = sorted(bundle.glob("apache_tvm_ffi-*.whl"))
        if not wheels:
            raise SystemExit(
                f"no apache_tvm_ffi wheel in {bundle} (emit with --ffi-wheel)"
            ) from None
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--target", str(site), str(wheels[-1])], check=True)  # fmt: skip
        env = {
            **os.environ,
            "TILEWAVE_TVM_RUNTIME_SITE": str(site),
            "TVM_USE_RUNTIME_LIB": "1",
            "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        }
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *argv], env)


def make_inputs(case: dict[str, Any], torch: Any) -> tuple[dict[str, Any], list[Any]]:
    """Random inputs (fixed seed) and NaN-filled outputs as torch CUDA tensors, and the call's
    arguments. A ``uint32`` output (packed fp16 pairs) is a float16 torch tensor; it is passed
    as a ``torch.uint32`` view, or, where torch cannot export that dtype, as TVM's own
    ``uint32`` view of the same memory (``tvm.runtime.from_dlpack(...)._create_view``)."""
    import tvm

    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors, args = {}, []
    for name, shape, dtype, role in case["args"]:
        if role == "in":
            tensor = torch.randn(*shape, device="cuda", dtype=getattr(torch, dtype), generator=gen)
            arg = tensor
        elif dtype == "uint32":
            tensor = torch.full(
                (*shape[:-1], shape[-1] * 2), float("nan"), device="cuda", dtype=torch.float16
            )
            try:
                arg = tensor.view(torch.uint32)
                torch.utils.dlpack.to_dlpack(arg)
            except (AttributeError, RuntimeError, TypeError):
                arg = tvm.runtime.from_dlpack(tensor)._create_view(tuple(shape), "uint32")
        else:
            tensor = torch.full(shape, float("nan"), device="cuda", dtype=getattr(torch, dtype))
            arg = tensor
        tensors[name] = tensor
        args.append(arg)
    return tensors, args


def reference(kind: str, tensors: dict[str, Any], torch: Any) -> tuple[Any, Any, Any]:
    """``(got, expected, torch_fn)``: the output as floats, torch's fp32/fp64 result and
    torch's own kernel for the same work (timed next to the case)."""
    if kind == "block_sum":
        a, out = tensors["A"], tensors["B"]
        return (
            out.double(),
            a.double().view(out.shape[0], -1).sum(1),
            lambda: a.view(out.shape[0], -1).sum(1),
        )
    if kind == "transpose":
        a = tensors["A"]
        return tensors["B"].double(), a.t().double(), lambda: a.t().contiguous()
    if kind == "matmul":
        a, b = tensors["A"], tensors["B"]
        return tensors["C"].double(), a.double() @ b.double(), lambda: a @ b
    if kind == "matmul_nt_packed":
        a, b = tensors["A"], tensors["B"]
        return tensors["C"].float(), a.float() @ b.float().t(), lambda: a @ b.t()
    raise SystemExit(f"unknown reference {kind!r}")


def run_case(in_dir: Path, case: dict[str, Any], form: str) -> dict[str, Any]:
    """Load one library with TVM, call it with torch tensors, check and time it."""
    import torch
    import tvm

    module = tvm.runtime.load_module(str(in_dir / case["files"][form]))
    func = module[case["entry"]]
    tensors, args = make_inputs(case, torch)
    func(*args)
    torch.cuda.synchronize()
    got, expected, torch_fn = reference(case["reference"], tensors, torch)
    scale = max(float(expected.abs().max()), 1e-30)
    error = float((got - expected).abs().nan_to_num(float("inf")).max()) / scale
    result = {"rel_err": error, "correct": error < TOLERANCE, "device": module.imports[0].kind}
    result["ms"] = _median_ms(lambda: func(*args), torch)
    result["torch_ms"] = _median_ms(torch_fn, torch)
    return result


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def register_nvrtc_arch() -> str | None:
    """In TVM's runtime-only mode, give TVM's NVRTC callback the GPU's arch.

    A library whose device code is CUDA source (the ``jit`` form) is compiled when it is
    loaded, by ``tvm_callback_cuda_compile`` (``tvm.support.nvcc``, NVRTC by default). Without
    an arch that callback asks ``tvm.target.Target.current()``, whose FFI function lives in
    the compiler library that runtime-only TVM does not load (``AttributeError: module
    'tvm.target._ffi_api' has no attribute 'TargetCurrent'``). This re-registers the callback
    with the arch TVM itself would derive from the GPU (``sm_XY``, ``a`` from sm_90 on).
    Returns the arch, or ``None`` when TVM's compiler is loaded (nothing to do).
    """
    import tvm
    import tvm_ffi
    from tvm.support import nvcc

    if not tvm.base._RUNTIME_ONLY:
        return None
    major, minor = tvm.cuda(0).compute_version.split(".")
    arch = f"sm_{major}{minor}" + ("a" if int(major) >= 9 else "")

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _compile(code: str) -> bytearray:
        return nvcc.compile_cuda(code, target_format="cubin", arch=arch, compiler="nvrtc")

    return arch


def run(in_dir: Path) -> int:
    """Every case in both forms; one table. Exit status 1 when one fails or is wrong."""
    import torch
    import tvm

    torch.cuda.init()
    driver = load_cuda_runtime()
    arch = register_nvrtc_arch()
    manifest = json.loads((in_dir / "manifest.json").read_text())
    print(
        f"tvm {tvm.__version__} from {Path(tvm.__file__).parent} (runtime only: "
        f"{os.environ.get('TVM_USE_RUNTIME_LIB') == '1'}), driver: {driver}, NVRTC arch: "
        f"{arch or 'from the target'}, "
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}"
    )
    rows = [
        (
            "case",
            "tir_pipeline",
            "form",
            "loaded as",
            "correct (rel err)",
            "us",
            "torch us",
            "vs torch",
            "TFLOP/s",
        )
    ]
    failed = 0
    for case in manifest["cases"].values():
        for form in FORMS:
            try:
                result = run_case(in_dir, case, form)
            except Exception as err:  # a row, not a crash
                message = " ".join(f"{type(err).__name__}: {err}".split())[:240]
                rows.append(
                    (
                        case["name"],
                        case["pipeline"],
                        form,
                        "-",
                        f"FAILED {message}",
                        "-",
                        "-",
                        "-",
                        "-",
                    )
                )
                failed += 1
                continue
            flops = case["flops"]
            rows.append(
                (
                    case["name"],
                    case["pipeline"],
                    form,
                    result["device"],
                    f"{result['correct']} ({result['rel_err']:.1e})",
                    f"{result['ms'] * 1e3:.1f}",
                    f"{result['torch_ms'] * 1e3:.1f}",
                    f"{result['torch_ms'] / result['ms']:.2f}",
                    f"{flops / result['ms'] / 1e9:.1f}" if flops else "-",
                )
            )
            failed += not result["correct"]
    _table(rows)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR`` (TVM side) or ``--run DIR`` (GPU side)."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emit", type=Path, metavar="DIR")
    parser.add_argument("--ffi-wheel", type=Path, metavar="WHEEL")
    parser.add_argument("--run", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    if args.emit is not None:
        return emit(args.emit, args.ffi_wheel)
    if args.run is not None:
        ensure_runtime(args.run, argv)
        return run(args.run)
    parser.error("give --emit DIR or --run DIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
