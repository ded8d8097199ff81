"""Each class of bug racecheck reports: the buggy kernel shows it, the fixed one is clean."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import racecheck_kernels as k

from tilewave.racecheck import racecheck

# (buggy kernel, fixed kernel, target, kinds that must be reported, buffer the report names)
CASES = [
    ("view_raw_bug", "view_raw_ok", "sm_90a", {"RAW"}, "buf"),
    ("loop_war_bug", "loop_war_ok", "sm_90a", {"WAR"}, "S"),
    ("bytes_waw_bug", "bytes_waw_ok", "sm_90a", {"WAW"}, "buf"),
    ("cp_async_bug", "cp_async_ok", "sm_90a", {"RAW"}, "S"),
    ("tma_load_no_wait_bug", "tma_load_ok", "sm_90a", {"RAW"}, "S"),
    ("tma_load_no_expect_tx_bug", "tma_load_ok", "sm_90a", {"RAW"}, "S"),
    ("mbarrier_wrong_parity_bug", "mbarrier_ok", "sm_90a", {"deadlock"}, ""),
    ("mbarrier_short_count_bug", "mbarrier_ok", "sm_90a", {"deadlock"}, ""),
    ("mbarrier_init_unpublished_bug", "mbarrier_ok", "sm_90a", {"WAW"}, "bar"),
    ("bulk_store_no_fence_bug", "bulk_store_ok", "sm_90a", {"PROXY"}, "S"),
    ("bulk_store_reuse_bug", "bulk_store_ok", "sm_90a", {"WAR"}, "S"),
    ("wgmma_no_fence_bug", "wgmma_ok", "sm_90a", {"PROXY"}, "smem"),
    ("wgmma_overwrite_bug", "wgmma_ok", "sm_90a", {"WAR"}, "smem"),
    ("split_bug", "split_ok", "sm_90a", {"RAW"}, "S"),
    ("split_wait_unsignalled_bug", "split_ok", "sm_90a", {"deadlock"}, ""),
    ("divergent_barrier_bug", "in_bounds_ok", "sm_90a", {"deadlock"}, ""),
    ("named_all_sync_bug", "named_all_sync_ok", "sm_90a", {"barrier-divergent"}, ""),
    ("named_explicit_aligned_bug", "named_all_sync_ok", "sm_90a", {"barrier-divergent"}, ""),
    ("syncthreads_in_branches_bug", "syncthreads_in_branches_ok", "sm_90a",
     {"barrier-divergent"}, ""),
    ("out_of_bounds_bug", "in_bounds_ok", "sm_90a", {"out-of-bounds"}, "S"),
    ("lds_dma_bug", "lds_dma_ok", "gfx942", {"RAW"}, "S"),
]


@pytest.mark.parametrize(("bug", "fixed", "target", "kinds", "buffer"), CASES,
                         ids=[c[0] for c in CASES])
def test_bug_reported_and_fix_clean(bug, fixed, target, kinds, buffer):
    report = racecheck(getattr(k, bug), target)
    assert not report.ok
    assert kinds <= report.kinds(), report.format()
    for finding in report.findings:
        if finding.kind in kinds:
            assert finding.statements and all(finding.statements)
            assert finding.schedule in report.schedules
            if buffer:
                assert finding.buffer == buffer
    clean = racecheck(getattr(k, fixed), target)
    assert clean.ok, clean.format()
    assert clean.findings == []


def test_named_barrier_count_never_reached_deadlocks():
    report = racecheck(k.named_count_bug, "sm_90a")
    waits = {f.message.split(" at ")[1].split(" (0")[0] for f in report.findings
             if f.kind == "deadlock"}
    # the consumers wait for 384 threads at barrier 1, so the producers wait at barrier 2
    assert waits == {"barrier 1 (count 384)", "barrier 2 (count 256)"}, report.format()


def test_named_barriers_without_the_war_pair_race_or_overrun():
    report = racecheck(k.named_missing_war_bug, "sm_90a")
    assert {"WAR", "RAW"} & report.kinds(), report.format()


def test_uninitialised_read_is_a_warning_naming_the_bytes():
    report = racecheck(k.uninitialised_bug, "sm_90a")
    assert report.ok  # a warning, not an error
    (finding,) = report.findings
    assert finding.kind == "uninitialised"
    assert finding.buffer == "S" and finding.byte_range == (256, 511)


def test_race_report_names_both_statements_threads_and_bytes():
    report = racecheck(k.view_raw_bug, "sm_90a", schedules=["lockstep"])
    (finding,) = [f for f in report.findings if f.kind == "RAW"]
    assert finding.statements[0].startswith("S[tx] = A[tx]")
    assert finding.statements[1].startswith("B[tx] = W[127 - tx]")
    assert finding.byte_range == (256, 511)  # S's bytes: elem_offset 64 x 4 bytes on
    assert finding.threads[0].startswith("thread ") and finding.schedule == "lockstep"
    text = report.format()
    assert "[RAW]" in text and "buf" in text and "line" in text


def test_disjoint_warps_need_no_barrier():
    # the fixed kernels above are clean under every default schedule, including per-warp ones
    report = racecheck(k.loop_war_ok, "sm_90a", schedules=["warps", "random:3", "reverse"])
    assert report.ok and report.steps > 0


def test_aligned_syncs_at_two_sites_name_both_statements_and_the_barrier():
    report = racecheck(k.named_all_sync_bug, "sm_90a")
    divergent = [f for f in report.findings if f.kind == "barrier-divergent"]
    # ids 1 and 2 are each completed by the producers' and the consumers' own bar.sync
    assert sorted(f.message.split(" was ")[0] for f in divergent) == [
        "one generation of barrier 1", "one generation of barrier 2"], report.format()
    for finding in divergent:
        assert len(finding.statements) == 2 and finding.statements[0] != finding.statements[1]
        assert "barrier.sync without .aligned" in finding.message
        assert finding.threads == ("threads 0, 1, ... 255 (256)",)


def test_bar_arrive_from_another_site_is_not_divergent():
    # PTX's producer/consumer example: the arrivals come from other instructions, but each
    # generation has one blocking (bar.sync) site
    report = racecheck(k.named_arrive_sync_ok, "sm_90a")
    assert report.ok and report.findings == [], report.format()
