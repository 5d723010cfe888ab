"""What gitstate stores, as bytes and names: canonical CBOR, ref-name encoding, state trees,
checkpoint and session-file payloads and their commit messages. Pure functions over the git layer's
reader and writer; no refs are read or moved here (docs/FORMAT.md is the contract)."""

import importlib
from typing import Any

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"Checkpoint": "checkpoint"}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
