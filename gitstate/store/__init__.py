"""The checkpoint store: :class:`Store`, runs, branches, node boundaries, pruning, session files,
checkpoint references, and the one :class:`Transaction` every write goes through (objects first,
then compare-and-swap ref moves with reflog entries, under one retry and deadline policy)."""

import importlib
from typing import Any

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"BranchInfo": "branches", "FileVersion": "sessionfiles", "NodeBoundary": "run", "PruneResult": "run", "Run": "run", "RunSummary": "store", "SessionFiles": "sessionfiles", "Store": "store", "Transaction": "transaction", "open_store": "store"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
