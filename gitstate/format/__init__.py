"""What gitstate stores, as bytes and names: canonical CBOR, ref-name encoding, state trees,
checkpoint and session-file payloads and their commit messages. Pure functions over the git layer's
reader and writer; no refs are read or moved here (docs/FORMAT.md is the contract)."""

from gitstate.exports import lazy_getattr

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"Checkpoint": "checkpoint"}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_getattr(__name__, _PUBLIC)
