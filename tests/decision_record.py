"""What the barrier pass and the verifier decide, recorded to compare two versions.

A change meant only to make InsertSharedBarriers faster must leave every decision as it
was. With ``TILEWAVE_DECISION_RECORD=PATH`` set, ``conftest.py`` installs this recorder for
the whole test run: every call of ``insert_shared_barriers`` and ``find_shared_hazards``
(through whichever module imported them) appends one JSON line to PATH with the function,
a hash of its input (the arguments as TVMScript, or their ``repr``) and a hash of its
output (or of the exception it raised). Then::

    TILEWAVE_DECISION_RECORD=/tmp/old.jsonl python -m pytest tests   # on the old commit
    TILEWAVE_DECISION_RECORD=/tmp/new.jsonl python -m pytest tests   # on the change
    python tests/decision_record.py /tmp/old.jsonl /tmp/new.jsonl

prints how many inputs both runs met and which of them got another output (exit status 1
when any did). An input is compared by the set of outputs it got: a test that runs one
kernel under several settings the arguments do not show (an environment switch) records
each. Inputs that property-based tests draw anew on every run are met by one run only
and not compared (about half of a full run's). It compares versions of tilewave with each
other; it is not an oracle of correctness (the racecheck tests and the GPU runs are).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the recorded functions: (module, attribute)
RECORDED = (
    ("tilewave.transforms.insert_shared_barriers", "insert_shared_barriers"),
    ("tilewave.analysis.shared_hazards", "find_shared_hazards"),
)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _text(value: Any) -> str:
    """A value as text that two versions print alike: TVMScript for IR, else ``repr``."""
    if isinstance(value, (list, tuple)):
        return "[" + "|".join(_text(v) for v in value) + "]"
    script = getattr(value, "script", None)
    if callable(script):
        try:
            return str(script())
        except Exception:  # (an object whose printer needs more context: use its repr)
            pass
    return repr(value)


def _recording(name: str, original: Callable[..., Any], out: Any) -> Callable[..., Any]:
    def recorder(*args: Any, **kwargs: Any) -> Any:
        named = (f"{k}={_text(v)}" for k, v in sorted(kwargs.items()))
        call = "|".join([name, *(_text(a) for a in args), *named])
        # (the test is kept to find a difference's source; it is not part of the input)
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        entry = {"function": name, "input": _digest(call), "test": test}
        try:
            result = original(*args, **kwargs)
        except Exception as err:
            entry["output"] = _digest(f"raised {type(err).__name__}: {err}")
            out.write(json.dumps(entry) + "\n")
            raise
        entry["output"] = _digest(_text(result))
        out.write(json.dumps(entry) + "\n")
        return result

    recorder.__wrapped__ = original  # type: ignore[attr-defined]
    recorder.__name__ = original.__name__
    recorder.__doc__ = original.__doc__
    return recorder


def install(path: str | Path) -> Callable[[], None]:
    """Record every call of the :data:`RECORDED` functions into ``path`` (appended), in
    every tilewave module that refers to them; returns the function that undoes it."""
    import tilewave

    for info in pkgutil.walk_packages(tilewave.__path__, "tilewave."):
        try:
            importlib.import_module(info.name)  # (so every module that imports them is seen)
        except ImportError:
            continue
    out = open(path, "a", buffering=1)  # (open until uninstalled; one line per call)
    wrappers = {}
    for module_name, attribute in RECORDED:
        original = getattr(sys.modules[module_name], attribute)
        wrappers[id(original)] = (original, _recording(attribute, original, out))
    replaced: list[tuple[Any, str, Any]] = []
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("tilewave"):
            continue
        for attribute, value in list(vars(module).items()):
            found = wrappers.get(id(value))
            if found is not None and value is found[0]:
                setattr(module, attribute, found[1])
                replaced.append((module, attribute, value))

    def uninstall() -> None:
        for module, attribute, value in replaced:
            setattr(module, attribute, value)
        out.close()

    return uninstall


#: a loaded record: per input hash, the function, the output hashes seen for it and the
#: first test that met it
Record = dict[str, tuple[str, set[str], str]]


def load(path: str | Path) -> Record:
    """A record file as a :data:`Record`."""
    found: Record = {}
    with open(path) as lines:
        for line in lines:
            entry = json.loads(line)
            known = (entry["function"], set(), entry.get("test", ""))
            found.setdefault(entry["input"], known)[1].add(entry["output"])
    return found


def differences(old: Record, new: Record) -> list[str]:
    """The input hashes both records hold whose outputs differ."""
    return sorted(key for key in old.keys() & new.keys() if old[key][1] != new[key][1])


def main(argv: list[str]) -> int:
    """Compare two records (paths in ``argv``); 1 when some shared input differs."""
    if len(argv) != 2:
        print("usage: python tests/decision_record.py OLD.jsonl NEW.jsonl", file=sys.stderr)
        return 2
    old, new = load(argv[0]), load(argv[1])
    differing = differences(old, new)
    print(
        f"inputs: {len(old)} old, {len(new)} new, {len(old.keys() & new.keys())} in both; "
        f"outputs differing: {len(differing)}"
    )
    for key in differing:
        print(f"  {old[key][0]} input {key} (first met in {old[key][2] or 'no test'})")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
