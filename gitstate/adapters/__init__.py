"""Integrations on the public store API: the workflow adapter with the seed systems'
``IStateAdapter`` semantics (:class:`GitStateAdapter`)."""

from gitstate.adapters.workflow import ExecutionState, GitStateAdapter

__all__ = ["ExecutionState", "GitStateAdapter"]
