"""Sharing runs: push and pull with any git remote, bundles, and the pre-push leak guard. Built on
the store's public API; the store does not import this layer."""

from gitstate.exports import lazy_getattr

# What users may use from this package (also exported by :mod:`gitstate` itself); imported on first
# use (PEP 562), so importing one module of the package does not import the others.
_PUBLIC = {"HookInstall": "hooks", "PullResult": "remote", "PushResult": "remote", "RefResult": "remote", "export_bundle": "bundle", "import_bundle": "bundle", "install_hooks": "hooks", "pull": "remote", "push": "remote"}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_getattr(__name__, _PUBLIC)
