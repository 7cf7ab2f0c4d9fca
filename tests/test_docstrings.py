"""Every example in the library's docstrings runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import collapse
import collapse.book

# __main__ runs the command when imported.
MODULES = [
    *(
        f"collapse.{m.name}"
        for m in pkgutil.iter_modules(collapse.__path__)
        if m.name not in ("book", "__main__")
    ),
    "collapse.workloads",
    *(f"collapse.book.{m.name}" for m in pkgutil.iter_modules(collapse.book.__path__)),
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
