"""The wings (issue 42): every module that sat at the top of kit/ lives in a sub-package a reader
finds by name, and keeps its old name on `kit` so chapters and user code work as written."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import kit

ROOT = Path(kit.__file__).parent


@pytest.mark.parametrize("old", sorted(kit._MOVED))
def test_an_old_top_level_name_is_the_module_in_its_wing(old):
    where = f"{kit._MOVED[old]}.{old}"
    assert not (ROOT / f"{old}.py").exists(), f"kit/{old}.py is back at the top; it lives in {where}"
    assert getattr(kit, old) is importlib.import_module(where)
    namespace: dict[str, object] = {}
    exec(f"from kit import {old}", namespace)  # the form the chapters write
    assert namespace[old] is importlib.import_module(where)


def test_every_wing_module_is_named_by_its_wing():
    """A wing's docstring is its table of contents: it names each module the wing holds (modules
    made after the move, such as kit.workspaces.workspace_arena, too; only the moved ones are in
    kit._MOVED, the table of old top-level names)."""
    for wing in ("kit.core", "kit.workspaces", "kit.arrays", "kit.measurement", "kit.monitor", "kit.training"):
        package = importlib.import_module(wing)
        names = [info.name for info in pkgutil.iter_modules(package.__path__)]
        assert names, wing
        unnamed = [name for name in names if name not in (package.__doc__ or "")]
        assert not unnamed, f"{wing}'s docstring does not name {unnamed}"


def test_a_name_that_never_was_a_module_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'workspacez'"):
        kit.workspacez  # noqa: B018
