"""The user's worktree as trees: snapshots through a private index, path safety, restore plans and
their application to disk, diffs and views of checkpoints. Knows nothing of runs or refs: the store
layer decides what to snapshot or restore and records it."""
