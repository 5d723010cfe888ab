"""The checkpoint store: :class:`Store`, runs, branches, node boundaries, pruning, session files,
checkpoint references, and the one :class:`Transaction` every write goes through (objects first,
then compare-and-swap ref moves with reflog entries, under one retry and deadline policy)."""
