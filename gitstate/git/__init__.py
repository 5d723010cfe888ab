"""Git plumbing, knowing nothing of checkpoints: writing objects and packs, the one guarded object
reader, refs (compare-and-swap under git's own lock protocol, atomic multi-ref updates, reflogs,
stale-lock recovery), gitstate's own locks, whether a process still runs, the ``git`` command (always ``LC_ALL=C``), finding the
repository (as ``git rev-parse`` finds it).
Internal: not part of gitstate's public API (which :mod:`gitstate` and its subpackages'
``__all__`` name)."""

__all__: list[str] = []
