"""tests/decision_record.py: the decision recorder used to compare two tilewave versions."""

from __future__ import annotations

import importlib
import json

import decision_record
import pytest
from tvm.script import tirx as T

from tilewave.errors import PassOptionError

PASS_MODULE = importlib.import_module("tilewave.transforms.insert_shared_barriers")
HAZARDS_MODULE = importlib.import_module("tilewave.analysis.shared_hazards")


@T.prim_func
def neighbour_read(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        S[tx] = A[tx]
        B[tx] = S[63 - tx]


def test_records_each_call_with_its_output_and_restores_the_functions(tmp_path):
    import tilewave.transforms as transforms

    path = tmp_path / "record.jsonl"
    originals = (PASS_MODULE.insert_shared_barriers, transforms.insert_shared_barriers)
    uninstall = decision_record.install(path)
    try:
        assert PASS_MODULE.insert_shared_barriers is not originals[0]
        synced = transforms.insert_shared_barriers(neighbour_read, "sm_80")
        HAZARDS_MODULE.find_shared_hazards(synced, "sm_80")
        with pytest.raises(PassOptionError):
            transforms.insert_shared_barriers(neighbour_read, "sm_80", barrier_style="other")
    finally:
        uninstall()
    assert (PASS_MODULE.insert_shared_barriers, transforms.insert_shared_barriers) == originals
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["function"] for e in entries] == [
        "insert_shared_barriers",
        "find_shared_hazards",
        "insert_shared_barriers",
    ]
    # the pass's own run, the bad option and the verifier are three inputs
    assert len({e["input"] for e in entries}) == 3
    assert len(decision_record.load(path)) == 3


def _write(path, entries):
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


def test_differences_are_the_shared_inputs_with_other_outputs(tmp_path, capsys):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    same = {"function": "insert_shared_barriers", "input": "a", "output": "1"}
    _write(old, [same, {"function": "find_shared_hazards", "input": "b", "output": "2"},
                 {"function": "insert_shared_barriers", "input": "only-old", "output": "3"}])
    _write(new, [same, {"function": "find_shared_hazards", "input": "b", "output": "9"}])
    loaded_old, loaded_new = decision_record.load(old), decision_record.load(new)
    assert decision_record.differences(loaded_old, loaded_new) == ["b"]
    assert decision_record.main([str(old), str(new)]) == 1
    printed = capsys.readouterr().out
    assert "2 in both; outputs differing: 1" in printed and "find_shared_hazards input b" in printed
    assert decision_record.main([str(old), str(old)]) == 0
