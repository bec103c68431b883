"""The public surface of ``eventstore``: ``__all__``, the lazy table behind it and the
``TYPE_CHECKING`` imports for type checkers name the same things, and every public class
or function says it lives in a public module."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import eventstore
import eventstore.errors

INIT = Path(eventstore.__file__)


def _type_checking_names() -> set[str]:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                names.update(alias.asname or alias.name for alias in imp.names)
    return names


def test_all_names_the_lazy_table_and_the_type_checking_imports() -> None:
    exported = eventstore.__all__
    assert len(exported) == len(set(exported)), "a name is listed twice in __all__"
    assert set(exported) == set(eventstore._LAZY), "__all__ and the lazy table differ"
    assert set(exported) == _type_checking_names(), "__all__ and the TYPE_CHECKING imports differ"


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    for name in eventstore.__all__:
        value = getattr(eventstore, name)
        module = __import__(f"eventstore.{eventstore._LAZY[name]}", fromlist=[name])
        assert getattr(module, name) is value, name


def test_public_classes_and_functions_report_a_public_module() -> None:
    private = {}
    for name in eventstore.__all__:
        value = getattr(eventstore, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            module = value.__module__
            if any(part.startswith("_") for part in module.split(".")):
                private[name] = module
    assert not private, f"public names that report a private module: {private}"


def test_every_error_is_drawn_in_the_tree_and_exported() -> None:
    """errors.py draws its exception tree in its docstring: every error class of the
    module appears there, and each one the package exports is in ``__all__``."""
    doc = eventstore.errors.__doc__ or ""
    classes = [
        name
        for name, value in vars(eventstore.errors).items()
        if inspect.isclass(value)
        and issubclass(value, Exception)
        and value.__module__ == "eventstore.errors"
    ]
    assert "ConnectionDropped" in classes
    assert [c for c in classes if c not in doc] == []
    assert "ConnectionDropped" in eventstore.__all__
    assert issubclass(eventstore.ConnectionDropped, eventstore.StorageError)
