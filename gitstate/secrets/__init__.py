"""Credentials in stored agent state: a scanner built on Yelp's ``detect-secrets`` plugins plus
gitstate's own rules (provider key prefixes, JWTs, PEM private keys, passwords in URLs and
connection strings) and the user's rules (extra patterns, an allowlist of fingerprints). A finding
names a kind, a key path and a fingerprint, never the secret. Pure functions over decoded values
and :class:`gitstate.format.checkpoint.Checkpoint` views; the caller reads git config and files
(docs/SECURITY.md says what it finds and what it cannot)."""

from .policy import (
    DEFAULT_MODE,
    META_KEY,
    MODES,
    POLICY_KEY,
    Policy,
    SecretsPolicyError,
    masked,
    masked_file,
    masked_text,
    parse_mode,
    read_mode,
    read_rules,
    secrets_record,
)
from .rules import (
    ALLOW_KEY,
    PATTERN_KEY,
    RULES_FILE,
    Rule,
    Rules,
    SecretsRuleError,
    fingerprint,
)
from .scanner import Finding, Scanner, checkpoint_parts, marker

__all__ = ["ALLOW_KEY", "DEFAULT_MODE", "META_KEY", "MODES", "PATTERN_KEY", "POLICY_KEY", "RULES_FILE", "Finding",
           "Policy", "Rule", "Rules", "Scanner", "SecretsPolicyError", "SecretsRuleError", "checkpoint_parts",
           "fingerprint", "marker", "masked", "masked_file", "masked_text", "parse_mode", "read_mode", "read_rules",
           "secrets_record"]
