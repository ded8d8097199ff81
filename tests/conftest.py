"""Test-suite set-up: make tests/ importable so test modules share their helpers.

pytest runs with ``--import-mode=importlib`` (test files are not packages), so helper
modules in tests/ (``example_loader``, ``tir_interpreter``, kernel fixtures) are imported by
plain name from this directory. The barrier stage's output check is switched on for the
whole suite (``TILEWAVE_VERIFY_BARRIERS``).
"""

import os
import sys
from pathlib import Path

# Every lower/build in the suite checks the barrier stage's output with the verifier (a
# hazard left behind fails the test); users get that check only when they ask for it.
os.environ.setdefault("TILEWAVE_VERIFY_BARRIERS", "1")

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# Opt-in: record every decision of the barrier pass and the verifier into a file, to compare
# two versions of tilewave (tests/decision_record.py says how).
if os.environ.get("TILEWAVE_DECISION_RECORD"):
    import decision_record

    decision_record.install(os.environ["TILEWAVE_DECISION_RECORD"])
