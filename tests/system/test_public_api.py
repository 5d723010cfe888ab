"""The public surface: :mod:`gitstate` and each subpackage's ``__all__`` name what users may use;
every name there exists, the subpackages' names are the top level's own objects, and the plumbing
layer names nothing."""

from __future__ import annotations

import importlib

import pytest

import gitstate


@pytest.mark.parametrize("package", ["store", "sync", "workspace", "format", "git"])
def test_subpackage_all_names_exist_and_match_the_top_level(package: str) -> None:
    module = importlib.import_module(f"gitstate.{package}")
    for name in module.__all__:
        assert getattr(module, name) is getattr(gitstate, name), name
    assert set(module.__all__) <= set(gitstate.__all__)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_every_top_level_name_exists_and_plumbing_is_not_public() -> None:
    for name in gitstate.__all__:
        assert getattr(gitstate, name) is not None, name
    assert importlib.import_module("gitstate.git").__all__ == []
