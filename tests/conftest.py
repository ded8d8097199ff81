"""Test-suite set-up: make tests/ importable so test modules share their helpers.

pytest runs with ``--import-mode=importlib`` (test files are not packages), so helper
modules in tests/ (``example_loader``, ``tir_interpreter``, kernel fixtures) are imported by
plain name from this directory.
"""

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
