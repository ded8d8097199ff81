"""The per-architecture fact table and its constructors."""

from __future__ import annotations

import json

import pytest
import tvm

from tilewave.errors import UnknownTargetError
from tilewave.targets import TARGETS, get_target, target_names


def test_table_has_every_required_architecture():
    assert {"sm_90a", "sm_80", "gfx942", "gfx950", "gfx1200", "gfx1201"} <= set(target_names())


@pytest.mark.parametrize(
    ("name", "wave", "style", "async_proxy"),
    [
        ("sm_90a", 32, "basic", True),
        ("sm_80", 32, "basic", False),
        ("gfx942", 64, "basic", False),
        ("gfx950", 64, "basic", False),
        ("gfx1200", 32, "split", False),
        ("gfx1201", 32, "split", False),
    ],
)
def test_facts(name, wave, style, async_proxy):
    info = get_target(name)
    assert info.wave_size == wave
    assert info.barrier_style == style
    assert info.has_async_proxy is async_proxy
    assert info.shared_memory_bytes >= 65536


def test_split_style_implies_split_barrier_support():
    for info in TARGETS.values():
        if info.barrier_style == "split":
            assert info.has_split_barrier


def test_lds_sizes_differ_where_hardware_differs():
    assert get_target("gfx950").shared_memory_bytes == 160 * 1024
    assert get_target("gfx942").shared_memory_bytes == 64 * 1024
    assert get_target("gfx950").async_lds_copy == "buffer_load_lds"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}), "sm_90a"),
        (tvm.target.Target({"kind": "rocm", "mcpu": "gfx942"}), "gfx942"),
        ({"kind": "rocm", "mcpu": "gfx1201"}, "gfx1201"),
        (json.dumps({"kind": "cuda", "arch": "sm_80"}), "sm_80"),
        ("sm_90", "sm_90a"),
    ],
)
def test_built_from_tvm_targets_dicts_json_and_aliases(spec, expected):
    assert get_target(spec).name == expected


@pytest.mark.parametrize("name", list(TARGETS))
def test_tvm_target_round_trip(name):
    info = get_target(name)
    assert get_target(info.tvm_target()) is info


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("sm_75", r"unknown target 'sm_75'.*sm_90a.*gfx942"),
        ({"kind": "llvm"}, r"kind 'llvm'.*'cuda' and 'rocm'"),
        # TVM fills in arch=sm_50 when none is given and no GPU is present.
        ({"kind": "cuda"}, r"unknown target.*sm_50"),
        ({"kind": "rocm", "mcpu": "gfx90a"}, r"unknown target.*gfx90a"),
        ("{not json", r"not valid JSON"),
        (42, r"of type int"),
    ],
)
def test_unknown_targets_raise_with_the_known_list(spec, pattern):
    with pytest.raises(UnknownTargetError, match=pattern):
        get_target(spec)
