"""Sharing runs: push and pull with any git remote, bundles, and the pre-push leak guard. Built on
the store's public API; the store does not import this layer."""
