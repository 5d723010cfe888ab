"""The checkpoint store: :class:`Store`, runs, branches, node boundaries, pruning, session files,
checkpoint references, the housekeeping of gitstate's own objects (packing, merging), and the one :class:`Transaction` every write goes through (objects first,
then compare-and-swap ref moves with reflog entries, under one retry and deadline policy)."""

from gitstate.exports import lazy_getattr

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"BranchInfo": "branches", "FileVersion": "sessionfiles", "NodeBoundary": "run", "PruneResult": "run", "Run": "run", "RunSummary": "store", "SessionFiles": "sessionfiles", "Store": "store", "Transaction": "transaction", "open_store": "store"}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_getattr(__name__, _PUBLIC)
