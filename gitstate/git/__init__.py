"""Git plumbing, knowing nothing of checkpoints: writing objects and packs, the one guarded object
reader, refs (compare-and-swap under git's own lock protocol, reflogs, stale-lock recovery), the
``git`` command (always ``LC_ALL=C``), finding the repository, the private index, housekeeping."""
