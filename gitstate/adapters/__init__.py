"""Integrations on the public store API: the workflow adapter with the seed systems'
``IStateAdapter`` semantics."""
