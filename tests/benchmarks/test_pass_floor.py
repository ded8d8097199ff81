"""benchmarks/pass_floor.py: recorded pair answers replayed give the pass's own output."""

from __future__ import annotations

import pytest
from example_loader import REPO_ROOT, load_module

FLOOR = load_module(REPO_ROOT / "benchmarks" / "pass_floor.py")
SCALING = load_module(REPO_ROOT / "benchmarks" / "pass_scaling.py")
COUNT = load_module(REPO_ROOT / "benchmarks" / "barrier_count.py")


@pytest.fixture(scope="module")
def small_module():
    """A 60-statement scaling kernel at its synchronisation stage."""
    func = SCALING.parse(SCALING.kernel_source(60))
    return COUNT.sync_input(func, SCALING.TARGET)


def test_replay_reproduces_the_run(small_module):
    answers, expected = FLOOR.recorded_answers(small_module, SCALING.TARGET)
    assert answers and any(answers) and not all(answers)  # both verdicts occur
    seconds = FLOOR.replayed_time(small_module, SCALING.TARGET, answers, expected)
    assert seconds > 0
    real, floor, questions = FLOOR.pass_and_floor(small_module, SCALING.TARGET, 1)
    assert questions == len(answers) and real > 0 and floor > 0


def test_answers_of_another_run_are_refused(small_module):
    answers, expected = FLOOR.recorded_answers(small_module, SCALING.TARGET)
    flipped = [not verdict for verdict in answers]
    with pytest.raises(FLOOR.ReplayMismatch, match="do not belong to"):
        FLOOR.replayed_time(small_module, SCALING.TARGET, flipped, expected)


def test_the_pass_is_restored_after_a_replay(small_module):
    original = FLOOR._PASS_MODULE.may_conflict
    with pytest.raises(FLOOR.ReplayMismatch):
        FLOOR.replayed_time(small_module, SCALING.TARGET, [], None)
    assert FLOOR._PASS_MODULE.may_conflict is original
