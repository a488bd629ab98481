"""The pure core's docstring examples are run, so they cannot drift from the code."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import keyshared.core

MODULES = sorted(m.name for m in pkgutil.iter_modules(keyshared.core.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"keyshared.core.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) of keyshared.core.{name} failed"
