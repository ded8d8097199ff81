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
