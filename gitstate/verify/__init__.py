"""Checking a store end to end (``git agentos verify``): every ref, commit, payload and tree read
through the guarded reader, damage reported per run instead of stopping at the first."""

from gitstate.verify.checks import Problem, VerifyReport, verify

__all__ = ["Problem", "VerifyReport", "verify"]
