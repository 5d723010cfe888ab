"""What a package exports, imported on first use (PEP 562): ``import gitstate`` and each subpackage
stay cheap (no pygit2 until a name that needs it is used), and type checkers see ordinary imports."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, public: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``public[name]`` (a module path
    relative to the package) when ``name`` is first asked for."""

    def __getattr__(name: str) -> Any:
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f".{module}", package), name)

    return __getattr__
