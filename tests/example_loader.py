"""Load a script from examples/ as a module (the examples are scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = REPO_ROOT / "examples"


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Execute the Python file ``path`` as module ``name`` (default: the file's stem)."""
    module_name = name or path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def load_example(file_name: str) -> ModuleType:
    """Load ``examples/<file_name>`` as a module."""
    return load_module(EXAMPLES_DIR / file_name)
