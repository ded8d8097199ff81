"""benchmarks/racecheck_agreement.py's judging (no GPU): which findings compute-sanitizer can
see, when a row agrees, and the named-sync respelling behind its ``named-aligned`` row."""

import tvm
from example_loader import REPO_ROOT, load_example, load_module

from tilewave.racecheck import racecheck

agreement = load_module(REPO_ROOT / "benchmarks" / "racecheck_agreement.py", "rc_agreement")


def _row(file: str, findings: list[dict]) -> dict:
    return {"kernel": "k", "variant": file, "file": file, "needs_tensor_maps": False,
            "racecheck_kinds": sorted({f["kind"] for f in findings}),
            "racecheck_findings": findings}


def _result(race: int, sync: int) -> dict:
    return {"racecheck": race, "synccheck": sync, "race_log": "", "sync_log": ""}


THREAD_RAW = {"kind": "RAW", "actors": ["thread 1", "thread 0"], "message": "read after"}
TMA_RAW = {"kind": "RAW", "actors": ["thread 1", "bulk/TMA unit of thread 0"], "message": ""}
BEFORE_INIT = {"kind": "deadlock", "actors": ["threads [1, 2]"],
               "message": "mbarrier in 'buf' used before mbarrier.init"}
DIVERGENT = {"kind": "barrier-divergent", "actors": ["threads 0, 1, ... 255 (256)"],
             "message": "one generation of barrier 1 ..."}


def test_thread_races_are_seen_by_both_async_and_init_ones_by_tilewave_only():
    both, only = agreement.split_findings(_row("a", [THREAD_RAW, TMA_RAW, BEFORE_INIT,
                                                      DIVERGENT]))
    assert both == {"RAW", "barrier-divergent"}
    assert only == {"RAW (async proxy)", "mbarrier used before init"}


def test_rows_agree_only_when_both_verdicts_match(capsys):
    rows = [_row("racy", [THREAD_RAW]), _row("tma_only", [TMA_RAW]),
            _row("divergent", [DIVERGENT]), _row("clean", [])]
    agreeing = {"racy": _result(100, 0), "tma_only": _result(0, 0),
                "divergent": _result(0, 2048), "clean": _result(0, 0)}
    assert agreement.print_table(rows, agreeing) == 0
    table = capsys.readouterr().out
    assert table.count("| yes |") == 4 and "RAW (async proxy)" in table
    assert agreement.print_table(rows, {**agreeing, "divergent": _result(0, 0)}) == 1
    assert agreement.print_table(rows, {**agreeing, "tma_only": _result(3, 0)}) == 1
    assert "| NO |" in capsys.readouterr().out


def test_respelled_named_syncs_round_trip_and_only_the_aligned_form_is_divergent():
    example = load_example("shared_barriers_racecheck_h100.py")
    func = example.kernels()["warp_specialized"]
    named = example.variants_of(func, "warp_specialized")["tilewave-named"]
    aligned = agreement.respell_named_syncs(named, aligned=True)
    unaligned = agreement.respell_named_syncs(aligned, aligned=False)
    assert "barrier-divergent" in racecheck(aligned, "sm_90a").kinds()
    assert racecheck(unaligned, "sm_90a").ok
    tvm.ir.assert_structural_equal(
        agreement.respell_named_syncs(unaligned, aligned=True).body, aligned.body)
