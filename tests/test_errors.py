"""The exception hierarchy and the location formatting every message uses."""

from __future__ import annotations

import inspect

from tvm import tirx

from tilewave import errors
from tilewave.errors import TilewaveError, where


def test_every_error_class_derives_from_tilewave_error_and_is_documented():
    classes = [
        obj for obj in vars(errors).values()
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors.__name__
    ]  # fmt: skip
    assert len(classes) >= 8
    for cls in classes:
        assert issubclass(cls, TilewaveError)
        assert cls.__doc__ and cls.__doc__.strip()


def test_where_names_function_and_statement():
    x = tirx.Var("x", "int32")
    stmt = tirx.Evaluate(x + 1)
    text = where("kernel", stmt)
    assert text == "in function 'kernel' at `T.evaluate(x + 1)`"


def test_where_abbreviates_long_statements_and_skips_missing_parts():
    x = tirx.Var("x", "int32")
    long_expr = x
    for _ in range(40):
        long_expr = long_expr + x
    text = where(None, tirx.Evaluate(long_expr))
    assert text.startswith("at `") and text.endswith("...`")
    assert len(text) < 140
    assert where("k") == "in function 'k'"
    assert where(None) == ""
