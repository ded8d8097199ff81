"""Issue 15's kernels on the H100 under ``compute-sanitizer --tool racecheck``, results checked.

Kernels: the shared-storage aliasing forms and same-element loops of
``tests/aliasing_kernels.py`` and, when ``benchmarks/issue15_uniform_cases.py`` exists, its
block-uniform branch kernels. Variants:

* aliasing kernels: ``tilewave`` (``tilewave.build``), ``tvm`` (TVM's own pipeline and
  ``ThreadSync``, through ``tvm.compile``) and ``buffer-identity`` (tilewave with the pass's
  storage identity, the verifier's storage model and the same-element rule switched off:
  the behaviour before issue 15, which racecheck should catch);
* uniform-branch kernels: ``hand`` (barriers as written, tilewave's sync stages left out)
  and ``tilewave`` (the stripped kernel through ``tilewave.build``).

Two steps, because the GPU machine has no TVM:

* ``--emit DIR`` (here): build every variant, write its CUDA source, the inputs and the
  expected outputs (NumPy reference for the aliasing kernels) and ``DIR/manifest.json``;
* ``--run DIR`` (on the H100): compile with nvcc for sm_90a, launch each variant under
  ``compute-sanitizer --tool racecheck`` (cupy), save its outputs, compare them with the
  reference (uniform kernels: tilewave's outputs against the hand kernel's), and print one
  table row per variant: ``__syncthreads`` in the source (and executed by one thread, loops
  with constant bounds counted, every branch taken; ``?`` for other loops), the hazards
  racecheck shows (at most 100) and its error count, and the result.

Exit status 1 when a tilewave variant has a racecheck error or a wrong result. Without
nvcc or compute-sanitizer, ``--run`` prints why and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NVCC = ["nvcc", "-gencode", "arch=compute_90a,code=sm_90a", "-cubin"]
#: tilewave's sync stages, left out when a kernel is built with its barriers as written
AS_WRITTEN = ("tilewave.InsertSharedBarriers", "tilewave.InjectFenceProxy")
SANITIZER_TIMEOUT_S = 120
_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warn")
_SIGNATURE = re.compile(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)")
_FOR = re.compile(r"for \(int \w+ = (-?\d+); \w+ < (-?\d+); \+\+\w+\) \{")
_C_TYPES = {"float": "float32", "half": "float16", "int": "int32", "double": "float64",
            "signed char": "int8", "unsigned char": "uint8", "uint": "uint32"}


# ---------------------------------------------------------------- emit (TVM side)


@contextlib.contextmanager
def buffer_identity() -> Iterator[None]:
    """tilewave as before issue 15: two buffers are two memories (no storage map for the
    pass, no storage model in the verifier) and every store pair is ordered."""
    import importlib
    from unittest import mock

    from tilewave.analysis.storage_model import SharedMemoryModel

    # the package re-exports functions under these modules' names: import the modules
    shared_access = importlib.import_module("tilewave.analysis.shared_access")
    isb = importlib.import_module("tilewave.transforms.insert_shared_barriers")

    with mock.patch.object(isb, "storage_map", lambda func: None), \
            mock.patch.object(SharedMemoryModel, "conflict", lambda *a, **k: False), \
            mock.patch.object(shared_access, "stores_alike", lambda *a: False):
        yield


def _dynamic_bytes(func: Any) -> int:
    """Bytes of every ``shared.dyn`` allocation of the input (an upper bound for any
    layout; unused dynamic shared memory is harmless)."""
    import tvm
    from tvm import tirx

    from tilewave.ir.walker import post_order_visit

    total = [0]

    def visit(node: Any) -> None:
        if isinstance(node, tirx.AllocBuffer) and str(node.buffer.ty.storage_scope) == \
                "shared.dyn":
            count = 1
            for dim in node.buffer.ty.shape:
                count *= int(dim.value)
            dtype = tvm.DataType(str(node.buffer.ty.dtype))
            total[0] += count * max(1, dtype.bits * dtype.lanes // 8) + 1024

    post_order_visit(func.body, visit)
    return total[0]


def _signature(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The kernel's name and parameters ``(name, dtype or "ptr:<dtype>")`` from its CUDA."""
    match = _SIGNATURE.search(source)
    if match is None:
        raise RuntimeError("no __global__ kernel in the source")
    params = []
    for raw in match.group(2).split(","):
        text = raw.replace("__restrict__", "").strip()
        name = text.split()[-1].lstrip("*")
        ctype = " ".join(text.split()[:-1]).replace("*", "").strip()
        ctype = _C_TYPES.get(ctype, ctype)
        params.append((name, f"ptr:{ctype}" if "*" in text else ctype))
    return match.group(1), params


def executed_barriers(source: str) -> int | None:
    """``__syncthreads()`` one thread executes, counting loops with constant bounds (every
    branch taken: an upper bound); ``None`` when a barrier sits in another kind of loop."""
    total = 0
    factors = [1]
    loop_factor: int | None = None  # the factor of a loop whose body's brace comes next
    for match in re.finditer(r"\{|\}|__syncthreads\(\)|\b(?:for|while)\b", source):
        token = match.group(0)
        if token in ("for", "while"):
            loop = _FOR.match(source, match.start())
            trips = None if loop is None else int(loop.group(2)) - int(loop.group(1))
            loop_factor = -1 if trips is None or factors[-1] < 0 else factors[-1] * trips
        elif token == "{":
            factors.append(factors[-1] if loop_factor is None else loop_factor)
            loop_factor = None
        elif token == "}":
            factors.pop()
        elif factors[-1] < 0:
            return None
        else:
            total += factors[-1]
    return total


def _arguments(func: Any, scalars: dict[str, int], seed: int) -> dict[str, Any]:
    """Inputs for every parameter of the input kernel: seeded random buffers (small
    integers for integer buffers) and the given scalars."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    from tilewave.analysis.shared_buffers import is_buffer

    for param in func.params:
        if not is_buffer(param):
            out[param.name] = int(scalars.get(param.name, 0))
            continue
        count = 1
        for dim in param.ty.shape:
            count *= int(dim)
        dtype = np.dtype(str(param.ty.dtype))
        values = rng.integers(-1, 3, count) if dtype.kind in "iu" else rng.standard_normal(count)
        out[param.name] = values.astype(dtype)
    return out


def _build(func: Any, variant: str, config: dict[str, Any]) -> str:
    import tvm

    import tilewave

    if variant == "tvm":
        target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
        with tvm.transform.PassContext(config=config):
            ex = tvm.compile(tvm.IRModule({"main": func}), target=target)
        return ex.mod.imports[0].inspect_source()
    disabled = list(AS_WRITTEN) if variant == "hand" else []
    with tvm.transform.PassContext(config=config, disabled_pass=disabled):
        if variant == "buffer-identity":
            with buffer_identity():
                return tilewave.build(func, "sm_90a").source
        return tilewave.build(func, "sm_90a").source


def _launch_shape(func: Any, config: dict[str, Any]) -> dict[str, Any]:
    import tvm

    import tilewave

    sys.path.insert(0, str(REPO / "benchmarks"))
    from racecheck_agreement import _device_kernels, _launch_facts

    with tvm.transform.PassContext(config=config):
        kernel = _device_kernels(tilewave.lower(func, "sm_90a"))[0][1]
    facts = _launch_facts(kernel)
    return {"grid": facts["grid"], "block": facts["block"], "dynamic_smem": _dynamic_bytes(func)}


def _jobs() -> list[dict[str, Any]]:
    """Every (kernel, variant) to emit, with what its run needs."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from aliasing_kernels import CASES

    jobs = []
    for name, case in CASES.items():
        args = _arguments(case.func, {}, seed=0)
        expected = case.reference(args)
        for variant in ("tilewave", "tvm", "buffer-identity"):
            jobs.append({"kernel": name, "group": "aliasing", "variant": variant,
                         "func": case.func, "config": dict(case.config), "args": args,
                         "check": {"output": case.output, "expected": expected,
                                   "tolerance": case.tolerance}})
    try:
        from issue15_uniform_cases import uniform_cases, without_assumes
    except ImportError:  # the other half of issue 15 is not there yet
        return jobs
    for case in uniform_cases():
        hand = case.hand()
        args = _arguments(hand, case.scalars, seed=1)
        for variant, func in (("hand", without_assumes(hand)), ("tilewave", case.stripped())):
            jobs.append({"kernel": case.name, "group": "uniform", "variant": variant,
                         "func": func, "config": {}, "args": args,
                         "check": {"same_as": f"{case.name}__hand"}})
    return jobs


def emit(out_dir: Path) -> list[dict[str, Any]]:
    """Build every variant; write sources, inputs, references and the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for job in _jobs():
        slug = f"{job['kernel']}__{job['variant']}".replace("-", "_")
        row: dict[str, Any] = {"kernel": job["kernel"], "variant": job["variant"],
                               "group": job["group"], "file": slug}
        try:
            source = _build(job["func"], job["variant"], job["config"])
            row.update(_launch_shape(job["func"], job["config"]))
        except Exception as err:  # a row, never a crash
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            rows.append(row)
            print(f"{slug}: {row['error']}", flush=True)
            continue
        (out_dir / f"{slug}.cu").write_text(source)
        symbol, params = _signature(source)
        row.update({"symbol": symbol, "params": params,
                    "syncthreads": source.count("__syncthreads()"),
                    "executed": executed_barriers(source)})
        np.savez(out_dir / f"{slug}.inputs.npz", **{
            k: np.asarray(v) for k, v in job["args"].items()})
        check = dict(job["check"])
        if "expected" in check:
            np.save(out_dir / f"{slug}.expected.npy", np.asarray(check.pop("expected")))
        row["check"] = check
        rows.append(row)
        print(f"{slug}: {row['syncthreads']} __syncthreads", flush=True)
    (out_dir / "manifest.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    return rows


# ---------------------------------------------------------------- run (GPU side)


def _argument_name(param: str, inputs: Any) -> str:
    for candidate in (param, param.removesuffix("_ptr"), param.rstrip("_0123456789")):
        if candidate in inputs:
            return candidate
    raise KeyError(f"no input for kernel parameter {param!r}")


def launch_one(in_dir: Path, slug: str) -> None:
    """Launch one variant (run under compute-sanitizer) and save its outputs."""
    import cupy as cp

    row = next(r for r in json.loads((in_dir / "manifest.json").read_text())["rows"]
               if r["file"] == slug)
    inputs = dict(np.load(in_dir / f"{slug}.inputs.npz"))
    kernel = cp.RawModule(path=str(in_dir / f"{slug}.cubin")).get_function(row["symbol"])
    device: dict[str, Any] = {}
    args = []
    for param, kind in row["params"]:
        name = _argument_name(param, inputs)
        if kind.startswith("ptr:"):
            device[name] = cp.asarray(inputs[name])
            args.append(device[name])
        else:
            args.append(np.dtype(kind).type(inputs[name]))
    kernel(tuple(row["grid"]), tuple(row["block"]), tuple(args),
           shared_mem=row["dynamic_smem"])
    cp.cuda.runtime.deviceSynchronize()
    np.savez(in_dir / f"{slug}.outputs.npz", **{k: cp.asnumpy(v) for k, v in device.items()})


def _sanitize(in_dir: Path, slug: str) -> dict[str, Any]:
    command = ["compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "all",
               sys.executable, str(Path(__file__).resolve()), "--launch", str(in_dir), slug]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SANITIZER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    text = done.stdout + done.stderr
    (in_dir / f"{slug}.racecheck.log").write_text(text)
    match = _SUMMARY.search(text)
    if match is None:
        return {"status": f"no summary (exit {done.returncode}): {text[-300:]}"}
    hazards, errors, warnings = (int(g) for g in match.groups())
    return {"status": "ok", "hazards": hazards, "errors": errors, "warnings": warnings}


def _result(in_dir: Path, row: dict[str, Any]) -> str:
    outputs = in_dir / f"{row['file']}.outputs.npz"
    if not outputs.exists():
        return "no output"
    got = dict(np.load(outputs))
    check = row["check"]
    if "same_as" in check:
        other = in_dir / f"{check['same_as']}.outputs.npz"
        if not other.exists():
            return "no reference run"
        want = dict(np.load(other))
        same = all(np.array_equal(got[k], want[k], equal_nan=True) for k in want)
        return "ok" if same else "DIFFERS from hand"
    expected = np.load(in_dir / f"{row['file']}.expected.npy")
    value = got[check["output"]].astype(np.float64)
    err = float(np.max(np.abs(value - expected.astype(np.float64))))
    scale = float(np.max(np.abs(expected))) or 1.0
    return "ok" if err <= check["tolerance"] * scale else f"WRONG (max err {err:.3g})"


def run(in_dir: Path, parallel: int = 8) -> int:
    """Compile, run every variant under racecheck, check results, print the table."""
    missing = [tool for tool in ("nvcc", "compute-sanitizer") if shutil.which(tool) is None]
    if missing:
        print(f"racecheck_h100: skipped, {' and '.join(missing)} not found (needs the H100)")
        return 0
    rows = [r for r in json.loads((in_dir / "manifest.json").read_text())["rows"]
            if "error" not in r]

    def compile_one(row: dict[str, Any]) -> str:
        done = subprocess.run([*NVCC, "-o", str(in_dir / f"{row['file']}.cubin"),
                               str(in_dir / f"{row['file']}.cu")], capture_output=True,
                              text=True)
        return done.stderr[-300:] if done.returncode else ""

    with ThreadPoolExecutor(parallel) as pool:
        compiled = dict(zip([r["file"] for r in rows], pool.map(compile_one, rows),
                            strict=True))
    runnable = [r for r in rows if not compiled[r["file"]]]
    with ThreadPoolExecutor(parallel) as pool:
        sanitized = dict(zip([r["file"] for r in runnable],
                             pool.map(lambda r: _sanitize(in_dir, r["file"]), runnable),
                             strict=True))
    return print_table(in_dir, json.loads((in_dir / "manifest.json").read_text())["rows"],
                       compiled, sanitized)


def print_table(in_dir: Path, rows: list[dict[str, Any]], compiled: dict[str, str],
                sanitized: dict[str, dict[str, Any]]) -> int:
    """One row per variant; status 1 when a tilewave variant races or computes wrong."""
    status = 0
    # compute-sanitizer displays at most 100 hazards; "errors" counts every racing access
    print("| kernel | variant | __syncthreads (executed) | hazards shown | racecheck errors "
          "| result |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        head = f"| {row['kernel']} | {row['variant']} |"
        if "syncthreads" in row:
            executed = row.get("executed")
            row["syncthreads"] = f"{row['syncthreads']} ({'?' if executed is None else executed})"
        if "error" in row:
            print(f"{head} - | build failed: {row['error'][:80]} | - | - |")
            status |= row["variant"] == "tilewave"
            continue
        if compiled.get(row["file"]):
            print(f"{head} {row['syncthreads']} | nvcc failed | - | - |")
            status |= row["variant"] == "tilewave"
            continue
        found = sanitized.get(row["file"], {"status": "not run"})
        if found["status"] != "ok":
            print(f"{head} {row['syncthreads']} | {found['status'][:80]} | - | - |")
            status |= row["variant"] == "tilewave"
            continue
        result = _result(in_dir, row)
        print(f"{head} {row['syncthreads']} | {found['hazards']} | {found['errors']} | "
              f"{result} |")
        if row["variant"] == "tilewave" and (found["errors"] or result != "ok"):
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--emit DIR``, ``--run DIR`` or ``--launch DIR SLUG`` (internal)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emit", type=Path, help="build every variant into DIR (needs TVM)")
    parser.add_argument("--run", type=Path, help="compile and sanitize DIR (needs the GPU)")
    parser.add_argument("--launch", nargs=2, metavar=("DIR", "SLUG"), help=argparse.SUPPRESS)
    parser.add_argument("--parallel", type=int, default=8)
    args = parser.parse_args(argv)
    if args.launch:
        launch_one(Path(args.launch[0]), args.launch[1])
        return 0
    status = 0
    if args.emit:
        emit(args.emit)
    if args.run:
        status = run(args.run, args.parallel)
    if not (args.emit or args.run):
        parser.print_help()
    return status


if __name__ == "__main__":
    sys.exit(main())
