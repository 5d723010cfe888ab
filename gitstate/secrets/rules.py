"""What counts as a credential: the detector plugins of Yelp's ``detect-secrets`` that match a
credential's own shape, gitstate's rules for the shapes those lack, and the user's rules (extra
patterns and an allowlist of fingerprints) from git config or ``.agentos-secrets.toml``.

``detect-secrets``' entropy plugins (``Base64HighEntropyString``, ``HexHighEntropyString``) are
left out on purpose: they fire on git ids, UUIDs and base64 image data, which agent state is full
of. So are its ``KeywordDetector`` (``password = …`` in code: too many hits on prose and code an
agent reads) and the detectors built like it on a keyword and an assignment (Cloudant, IBM Cloud
IAM, IBM COS HMAC, SoftLayer: they took two thirds of the scanning time for niche services), ``IPPublicDetector`` (an address is not a credential), ``ArtifactoryDetector``
(fires on capitalised words such as ``APEXLEGENDS``) and ``BasicAuthDetector`` (replaced by the
``url-password`` rule below, which stops the user part at the first ``/``)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitstate.errors import GitStateError

#: The file in a work tree that holds user rules (TOML: ``allow = [...]`` and ``[[pattern]]``).
RULES_FILE = ".agentos-secrets.toml"
#: Git config keys (multi-valued): fingerprints let through, and extra regular expressions.
ALLOW_KEY = "agentos.secrets.allow"
PATTERN_KEY = "agentos.secrets.pattern"
#: Hex digits of the SHA-256 of a secret that name it (8: an allowlisted fingerprint lets through
#: about one other secret in four billion; 4 would let one in 65,536).
FINGERPRINT_HEX = 8
#: The kind of a user pattern that names none.
CUSTOM_KIND = "custom"

_KIND = re.compile(r"[a-z0-9][a-z0-9-]{0,63}\Z")
_FINGERPRINT = re.compile(rf"[0-9a-f]{{{FINGERPRINT_HEX}}}\Z")

# Not inside a longer token: no base64 or token character right before (a base64 image never
# yields an ``AIza…`` from its middle), none right after where the shape has a fixed end.
_B = r"(?<![A-Za-z0-9+/_\-])"
_E = r"(?![A-Za-z0-9_\-])"
_PEM = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_URL_STOP = r"\s/@?#\"'<>"


class SecretsRuleError(GitStateError):
    """A user rule (git config or ``.agentos-secrets.toml``) cannot be used: bad TOML, a regular
    expression that does not compile, a fingerprint that is not 8 hex digits."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"secret rules in {source}: {reason}")


def fingerprint(secret: str) -> str:
    """The short name of a secret that output shows and allowlists hold: the first
    :data:`FINGERPRINT_HEX` hex digits of its SHA-256 (never the secret itself)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_HEX]


def _mixed(secret: str) -> bool:
    """Random keys mix digits and letters; hyphenated words do not."""
    return any(c.isdigit() for c in secret) and any(c.isalpha() for c in secret)


_PLACEHOLDER = re.compile(r"(?:[$%{<\[].*|\*+|[xX]+|\.\.\.|…)\Z")


def _real_password(secret: str) -> bool:
    """A URL password that is not a template placeholder (``${PASS}``, ``<password>``, ``***``)."""
    return not _PLACEHOLDER.match(secret)


@dataclass(frozen=True)
class Rule:
    """One pattern: findings of ``kind`` are its matches (its first group, when it has groups)
    that ``valid`` accepts."""

    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool] | None = None
    #: Text without any of these (in lowercased text when ``fold``) cannot match: the expression
    #: is not run on it (a substring test is far faster than a regular expression's search).
    needles: tuple[str, ...] = ()
    fold: bool = False

    def matches(self, text: str, lower: str | None = None) -> Iterable[tuple[str, int, int]]:
        """``(secret, start, end)`` of each match in ``text`` (``lower``: ``text.lower()``, if
        the caller has it)."""
        if self.needles:
            within = (lower if lower is not None else text.lower()) if self.fold else text
            if not any(n in within for n in self.needles):
                return
        group = 1 if self.pattern.groups else 0
        for m in self.pattern.finditer(text):
            secret = m.group(group)
            if secret and (self.valid is None or self.valid(secret)):
                yield secret, m.start(group), m.end(group)


#: gitstate's own rules, run before detect-secrets' plugins (a match of both is reported once,
#: with the kind named here).
BUILTIN: tuple[Rule, ...] = (
    Rule("private-key", re.compile(rf"{_PEM}(?:[\s\S]*?{_PEM_END}|[\s\S]{{0,200}})"), needles=("PRIVATE KEY",)),
    Rule("anthropic-api-key", re.compile(rf"{_B}sk-ant-[A-Za-z0-9_\-]{{20,}}"), _mixed, ("sk-ant-",)),
    Rule("openai-api-key", re.compile(rf"{_B}sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{{20,}}"), _mixed, ("sk-",)),
    Rule("github-token", re.compile(rf"{_B}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{30,}}){_E}"),
         needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Rule("aws-access-key", re.compile(rf"{_B}(?:AKIA|ASIA)[A-Z0-9]{{16}}{_E}"), needles=("AKIA", "ASIA")),
    Rule("slack-token", re.compile(rf"{_B}xox[abposr]-[A-Za-z0-9\-]{{10,}}"), _mixed, ("xox",)),
    Rule("stripe-key", re.compile(rf"{_B}(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{{16,}}{_E}"), needles=("k_live_", "k_test_")),
    Rule("google-api-key", re.compile(rf"{_B}AIza[0-9A-Za-z_\-]{{30,}}"), needles=("AIza",)),
    Rule("supabase-secret-key", re.compile(rf"{_B}sb_secret_[A-Za-z0-9_\-]{{16,}}"), needles=("sb_secret_",)),
    Rule("jwt", re.compile(rf"{_B}eyJ[A-Za-z0-9_\-]{{8,}}\.eyJ[A-Za-z0-9_\-]{{8,}}\.[A-Za-z0-9_\-]*"), needles=("eyJ",)),
    Rule("url-password", re.compile(rf"(?i)\b[a-z][a-z0-9+.\-]{{1,30}}://[^{_URL_STOP}:]*:([^{_URL_STOP}]+)@[^{_URL_STOP}:]+"),
         _real_password, ("://",)),
    Rule("connection-string-password", re.compile(
        r"(?i)(?<![a-z0-9_])(?:server|data source|host|address|user id|uid|database|initial catalog)\s*=[^;]*;"
        r"(?:[^;]*;){0,8}?\s*(?:password|pwd)\s*=\s*([^;\s'\"]+)"), _real_password, ("password", "pwd"), fold=True),
)

#: detect-secrets' plugins used (module, class), the kind each one's findings get, and substrings
#: of the lowercased text without which the plugin's expressions cannot match (none: always run).
DETECT_SECRETS_PLUGINS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("aws", "AWSKeyDetector", "aws-access-key", ("akia", "asia", "abia", "acca", "a3t", "aws")),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure-storage-key", ("accountkey=",)),
    ("discord", "DiscordBotTokenDetector", "discord-bot-token", (".",)),
    ("github_token", "GitHubTokenDetector", "github-token", ("gh",)),
    ("gitlab_token", "GitLabTokenDetector", "gitlab-token", ("gl", "gr1348941")),
    ("jwt", "JwtTokenDetector", "jwt", ("eyj",)),
    ("mailchimp", "MailchimpDetector", "mailchimp-key", ("-us",)),
    ("npm", "NpmDetector", "npm-token", ("_authtoken",)),
    ("openai", "OpenAIDetector", "openai-api-key", ("t3blbkfj",)),
    ("private_key", "PrivateKeyDetector", "private-key", ("private", "putty")),
    ("pypi_token", "PypiTokenDetector", "pypi-token", ("pypi-",)),
    ("sendgrid", "SendGridDetector", "sendgrid-key", ("sg.",)),
    ("slack", "SlackDetector", "slack-token", ("xox", "hooks.slack.com")),
    ("square_oauth", "SquareOAuthDetector", "square-oauth-secret", ("sq0csp-",)),
    ("stripe", "StripeDetector", "stripe-key", ("k_live_",)),
    ("telegram_token", "TelegramBotTokenDetector", "telegram-bot-token", (":",)),
    ("twilio", "TwilioKeyDetector", "twilio-key", ()),
)


@dataclass(frozen=True)
class Rules:
    """The user's rules: extra patterns and fingerprints let through (see :data:`RULES_FILE`,
    :data:`ALLOW_KEY`, :data:`PATTERN_KEY`)."""

    patterns: tuple[Rule, ...] = ()
    allow: frozenset[str] = field(default_factory=frozenset)

    def merged(self, other: Rules) -> Rules:
        """Both sets of rules."""
        return Rules(self.patterns + other.patterns, self.allow | other.allow)

    def allowing(self, fingerprints: Iterable[str], source: str = "--allow-secret") -> Rules:
        """These rules with more fingerprints let through (checked as :func:`parse_allow`)."""
        return Rules(self.patterns, self.allow | parse_allow(fingerprints, source))

    @classmethod
    def from_config(cls, allow: Iterable[str], patterns: Iterable[str], source: str = "git config") -> Rules:
        """Rules from the values of :data:`ALLOW_KEY` and :data:`PATTERN_KEY` (each pattern a
        regular expression of kind ``custom``; its first group, if any, is the secret)."""
        return cls(tuple(compile_rule(CUSTOM_KIND, p, f"{source} {PATTERN_KEY}") for p in patterns),
                   parse_allow(allow, f"{source} {ALLOW_KEY}"))

    @classmethod
    def from_toml(cls, text: str, source: str = RULES_FILE) -> Rules:
        """Rules from the text of a :data:`RULES_FILE`::

            allow = ["3f2a9c01"]             # fingerprints let through
            [[pattern]]
            kind = "internal-token"          # optional, default "custom"
            regex = "itk_[0-9a-f]{32}"       # its first group, if any, is the secret
        """
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SecretsRuleError(source, f"not valid TOML ({exc})") from None
        unknown = sorted(set(doc) - {"allow", "pattern"})
        if unknown:
            raise SecretsRuleError(source, f"unknown key(s) {', '.join(unknown)} (known: allow, pattern)")
        allow = doc.get("allow", [])
        items = doc.get("pattern", [])
        if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
            raise SecretsRuleError(source, "allow must be a list of fingerprints (strings)")
        if not isinstance(items, list):
            raise SecretsRuleError(source, "pattern must be a list ([[pattern]] tables or strings)")
        rules = []
        for item in items:
            if isinstance(item, str):
                rules.append(compile_rule(CUSTOM_KIND, item, source))
            elif isinstance(item, Mapping) and isinstance(item.get("regex"), str) and set(item) <= {"kind", "regex"}:
                rules.append(compile_rule(str(item.get("kind", CUSTOM_KIND)), item["regex"], source))
            else:
                raise SecretsRuleError(source, "each [[pattern]] needs a string 'regex' (and may have 'kind')")
        return cls(tuple(rules), parse_allow(allow, source))


def compile_rule(kind: str, regex: str, source: str) -> Rule:
    """A user :class:`Rule` (:class:`SecretsRuleError` when the kind or the expression is bad)."""
    if not _KIND.match(kind):
        raise SecretsRuleError(source, f"kind {kind!r} must be lowercase letters, digits and dashes")
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise SecretsRuleError(source, f"pattern {regex!r} does not compile ({exc})") from None
    if pattern.match(""):
        raise SecretsRuleError(source, f"pattern {regex!r} matches the empty string")
    return Rule(kind, pattern)


def parse_allow(values: Iterable[str], source: str) -> frozenset[str]:
    """Fingerprints as given (lowercased; :class:`SecretsRuleError` unless each is
    :data:`FINGERPRINT_HEX` hex digits)."""
    found = set()
    for value in values:
        fp = value.strip().lower()
        if not _FINGERPRINT.match(fp):
            raise SecretsRuleError(source, f"{value!r} is not a fingerprint ({FINGERPRINT_HEX} hex digits, "
                                           "as scan prints them)")
        found.add(fp)
    return frozenset(found)


def load_detect_secrets() -> list[tuple[str, Any, tuple[str, ...]]]:
    """``(kind, plugin, needles)`` for each of :data:`DETECT_SECRETS_PLUGINS` (imported on first use:
    detect-secrets imports ``requests``). Only their regular expressions run; nothing is verified
    over the network."""
    import importlib

    found = []
    for module, name, kind, needles in DETECT_SECRETS_PLUGINS:
        cls = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        found.append((kind, cls(), needles))
    return found
