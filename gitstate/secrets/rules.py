"""What counts as a credential: the detector plugins of Yelp's ``detect-secrets`` that match a
credential's own shape, gitstate's rules for the shapes those lack, and the user's rules (extra
patterns and an allowlist of fingerprints) from git config or ``.agentos-secrets.toml``.

``detect-secrets``' entropy plugins (``Base64HighEntropyString``, ``HexHighEntropyString``) are
left out on purpose: they fire on git ids, UUIDs and base64 image data, which agent state is full
of. So are its ``KeywordDetector`` (``password = …`` in code: too many hits on prose and code an
agent reads) and the detectors built like it on a keyword and an assignment (Cloudant, IBM Cloud
IAM, IBM COS HMAC, SoftLayer: they took two thirds of the scanning time for niche services), ``IPPublicDetector`` (an address is not a credential), ``ArtifactoryDetector``
(fires on capitalised words such as ``APEXLEGENDS``) and ``BasicAuthDetector`` (replaced by the
``url-password`` rule below, which stops the user part at the first ``/``). Where a plugin's
expression has a group, the whole match is the secret, unless what the match holds before the group
is not part of a token (``aws_secret_access_key = "…"``: the group is the value)."""

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

# Not inside a longer token: no token character right before a key's prefix. What may come
# before is anything else, and also the end of an escape (a JSON ``\n``, ``\t``, ``\r``, ``\"``
# or ``\u00a0``; a URL's ``%20``), which no token or base64 text holds. A prefix without ``-`` or
# ``_`` (``AIza``, ``AKIA``) can sit in the middle of base64 data, so neither ``+`` nor ``/`` may
# come before it (``strict``); a prefix with ``-`` or ``_`` cannot (standard base64 has neither),
# nor can a JWT (its dots), so ``/`` and ``+`` may (``https://ghp_…@github.com``).
def _start(width: int, strict: bool = False) -> str:
    """The check above, written after a prefix of ``width`` characters (``(?<!…)`` before a literal
    keeps the regular expression engine from searching for the literal quickly); ``strict``: no
    ``+`` or ``/`` before it either."""
    token = r"A-Za-z0-9_\-" + ("+/" if strict else "")
    w = f".{{{width}}}"
    return (rf"(?:(?<![{token}]{w})|(?<=\\[ntr\"]{w})|(?<=%[0-9A-Fa-f]{{2}}{w})"
            rf"|(?<=\\u[0-9A-Fa-f]{{4}}{w}))")


# ... and none right after where the shape has a fixed end.
_E = r"(?![A-Za-z0-9_\-])"
_PEM = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_PEM_END = r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
# A PEM body without its END line (cut tool output): its header lines (``Proc-Type: …``), then
# every run of 16 or more base64 characters separated only by line breaks (real ones, or JSON's
# ``\n``) and blanks, and a last short line.
_PEM_SEP = r"(?:\r?\n|\\r\\n|\\n|[ \t])"
_PEM_BODY = (rf"(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z][A-Za-z0-9\-]*:[^\r\n\\]*)*"
             rf"(?:{_PEM_SEP}+[A-Za-z0-9+/=]{{16,}})+(?:{_PEM_SEP}[A-Za-z0-9+/=]{{1,15}}(?={_PEM_SEP}|\Z|[\"'\\]))?")
# A URL's user (no ':', '@', '/'), its password (anything up to the last '@' that a host follows:
# a password may hold '/', '#', '@', '?') and its host.
_URL_USER = r"[^\s/@:\"'<>`]*"
_URL_PASSWORD = r"[^\s\"'`]+"
_URL_HOST = r"(?:[A-Za-z0-9\-._~%]+|\[[0-9A-Fa-f:.]+\])(?=[/:?#\s\"'<>`,;)\]}\\]|\Z)"
# Keys of a connection string (ADO.NET, ODBC, libpq, JDBC) that make a ``password=`` on the same
# line a connection's password.
_CONN_KEYS = (r"(?i)(?:(?<![a-z0-9_])(?:server|data source|host|hostaddr|address|addr|network address|user id|"
              r"uid|user|username|database|dbname|initial catalog|port|sslmode|driver|provider)\s*=|jdbc:|[a-z]://)")


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


def _keylike(secret: str) -> bool:
    """A random key holds a digit, and a long run of letters and digits or both cases; words
    joined by dashes (``sk-learn-models-2024-v1``, ``sk-your-api-key-here-123``) do not."""
    body = secret.split("-", 1)[-1]
    if not any(c.isdigit() for c in body):
        return False
    if re.search(r"[A-Za-z0-9]{16}", body):
        return True
    return any(c.isupper() for c in body) and any(c.islower() for c in body)


def _slack(secret: str) -> bool:
    """A Slack token ends in a random part (not a lowercase word: ``xoxo-2024-supercalifragilistic``)."""
    last = secret.rsplit("-", 1)[-1]
    return not (last.isalpha() and last.islower())


#: What a template puts where a password goes, when it is the whole password: ``${VAR}``,
#: ``$VAR_NAME``, ``$(command)``, ``%VAR%``, ``<password>``, ``{password}``, ``{{ password }}``,
#: ``[password]``, ``%(password)s``, ``%s``, ``***``, ``xxx``, ``...``. A name in brackets is words
#: (``db_password``, ``YOUR PASSWORD``, ``secrets.DbPass``), never a random mix of letters and digits.
_NAME = r"\s*\.?(?:[A-Za-z]+[0-9]*[ _.\-:]+)*[A-Za-z]+[0-9]*\s*"
_PLACEHOLDER = re.compile(
    rf"(?:\$\{{[^{{}}]*\}}|\$[A-Z_][A-Z0-9_]*|\$\([^()]*\)|%[A-Za-z_][A-Za-z0-9_]*%|<{_NAME}>|\{{\{{{_NAME}\}}\}}|"
    rf"\{{{_NAME}\}}|\{{[0-9]*\}}|\[{_NAME}\]|%\({_NAME}\)[sdr]|%[sdr]|\*+|[xX]+|\.\.\.|…)\Z")


def _real_password(secret: str) -> bool:
    """A password that is not a template placeholder (``${PASS}``, ``<password>``, ``***``), nor a
    port (``ldap://host:389@x``) or a port and path (``http://localhost:5173/@vite/client``)."""
    return not _PLACEHOLDER.match(secret) and not re.match(r"\d{1,5}(?:/|\Z)", secret)


@dataclass(frozen=True)
class Rule:
    """One pattern: findings of ``kind`` are its matches (the first of its groups that took part,
    when it has groups) that ``valid`` accepts."""

    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool] | None = None
    #: Text without any of these (in lowercased text when ``fold``) cannot match: the expression
    #: is not run on it (a substring test is far faster than a regular expression's search).
    needles: tuple[str, ...] = ()
    fold: bool = False
    #: A match counts only when this is found on the same line, at most :data:`NEAR` characters
    #: away (``password=…`` is a connection's password next to ``host=``).
    near: re.Pattern[str] | None = None

    def matches(self, text: str, lower: str | None = None) -> Iterable[tuple[str, int, int]]:
        """``(secret, start, end)`` of each match in ``text`` (``lower``: ``text.lower()``, if
        the caller has it)."""
        if self.needles:
            within = (lower if lower is not None else text.lower()) if self.fold else text
            if not any(n in within for n in self.needles):
                return
        groups = range(1, self.pattern.groups + 1) if self.pattern.groups else range(1)
        for m in self.pattern.finditer(text):
            group = next((g for g in groups if m.start(g) >= 0), 0)
            secret = m.group(group)
            if not secret or (self.valid is not None and not self.valid(secret)):
                continue
            if self.near is not None and not self._near(text, m.start(), m.end()):
                continue
            yield secret, m.start(group), m.end(group)

    def _near(self, text: str, start: int, end: int) -> bool:
        lo = max(text.rfind("\n", 0, start) + 1, start - NEAR)
        hi = text.find("\n", end)
        hi = min(len(text) if hi < 0 else hi, end + NEAR)
        assert self.near is not None
        return self.near.search(text, lo, hi) is not None


#: How far from a match its :attr:`Rule.near` context may be.
NEAR = 300

#: gitstate's own rules, run before detect-secrets' plugins (a match of both is reported once,
#: with the kind named here).
BUILTIN: tuple[Rule, ...] = (
    Rule("private-key", re.compile(rf"{_PEM}(?:[\s\S]*?{_PEM_END}|{_PEM_BODY})"), needles=("PRIVATE KEY",)),
    Rule("anthropic-api-key", re.compile(rf"sk-ant-{_start(7)}[A-Za-z0-9_\-]{{20,}}"), _keylike, ("sk-ant-",)),
    Rule("openai-api-key", re.compile(rf"sk-{_start(3)}(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{{20,}}"), _keylike,
         ("sk-",)),
    Rule("github-token", re.compile(rf"(?:gh[pousr]_{_start(4)}[A-Za-z0-9]{{30,}}|github_pat_{_start(11)}[A-Za-z0-9_]{{30,}})"
                                    r"(?![A-Za-z0-9_])"),
         needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Rule("aws-access-key", re.compile(rf"(?:AKIA|ASIA){_start(4, True)}[A-Z0-9]{{16}}{_E}"), needles=("AKIA", "ASIA")),
    # xoxb- (bot), xoxp- (user), xoxa-, xoxr-, xoxs-, xoxo-, xoxc-, xoxe- (refresh), xoxe.xoxp-
    # (rotating), xapp- (app-level): numeric parts, then a random part of 20 or more
    Rule("slack-token", re.compile(rf"(?:xox[a-z]|xapp){_start(4)}(?:\.xox[a-z])?-(?:\d+-)+(?:[A-Za-z0-9]+-)*"
                                   rf"[A-Za-z0-9]{{20,}}"), _slack, ("xox", "xapp")),
    Rule("stripe-key", re.compile(rf"(?:sk|rk)_{_start(3)}(?:live|test)_[0-9A-Za-z]{{16,}}{_E}"), needles=("k_live_", "k_test_")),
    Rule("google-api-key", re.compile(rf"AIza{_start(4, True)}[0-9A-Za-z_\-]{{30,}}"), needles=("AIza",)),
    Rule("supabase-secret-key", re.compile(rf"sb_secret_{_start(10)}[A-Za-z0-9_\-]{{16,}}"), needles=("sb_secret_",)),
    Rule("jwt", re.compile(rf"eyJ{_start(3)}[A-Za-z0-9_\-]{{8,}}\.eyJ[A-Za-z0-9_\-]{{8,}}\.[A-Za-z0-9_\-]*"), needles=("eyJ",)),
    Rule("url-password", re.compile(rf"(?i)\b[a-z][a-z0-9+.\-]{{1,30}}://{_URL_USER}:({_URL_PASSWORD})@{_URL_HOST}"),
         _real_password, ("://",)),
    # ADO.NET / ODBC (``Server=…;Password=…;``, the password first or last, quoted or not),
    # libpq (``host=… password=…``), JDBC (``…?user=…&password=…``, ``…;password=…``); not a
    # call's argument that names a variable (``connect(host=h, password=os.environ["PW"])``)
    Rule("connection-string-password", re.compile(
        r"(?i)(?<![a-z0-9_.\-])(?!(?:(?<=[(,])|(?<=[(,] ))(?:password|pwd|passwd)\s*=\s*[a-z_][a-z0-9_.]*[,)(\[])"
        r"(?:password|pwd|passwd)\s*=\s*(?!=)"
        r"(?:\\\"((?:[^\"\\\n]|\\[^\"])+)\\\"|'([^'\n]+)'|\"([^\"\n]+)\"|\{([^{}\n]+)\}|([^;&\s'\"\\]+))"),
        _real_password, ("password", "pwd", "passwd"), fold=True, near=re.compile(_CONN_KEYS)),
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


#: Checks of a plugin's finds by kind (detect-secrets' Slack expression takes ``xoxo-2024-see``).
PLUGIN_VALID: dict[str, Callable[[str], bool]] = {"slack-token": _slack}


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
    if nested_repeat(regex):
        raise SecretsRuleError(source, f"pattern {regex!r} repeats a group that itself repeats (as in '(a+)+'): "
                                       "it can take exponential time on some text; repeat only one of them")
    return Rule(kind, pattern)


def nested_repeat(regex: str) -> bool:
    """Whether ``regex`` repeats (``+``, ``*``, ``{n,}``, ``{n,m}`` with m > 1) a group that holds an
    unbounded repeat: the shape (``(a+)+``, ``(\\w*x?)*``) whose backtracking takes exponential
    time on text that almost matches. A check of the text of the expression, not a proof: it
    looks past escapes and character classes, not at alternations (``(a|aa)+``)."""
    inner: list[bool] = []  # per open group: whether it holds an unbounded repeat
    i, n = 0, len(regex)
    last_closed: bool | None = None  # the group that just closed held an unbounded repeat
    while i < n:
        c = regex[i]
        if c == "\\":
            i, last_closed = i + 2, None
            continue
        if c == "[":  # a character class: to its closing bracket
            j = i + 1
            if j < n and regex[j] == "^":
                j += 1
            if j < n and regex[j] == "]":
                j += 1
            while j < n and regex[j] != "]":
                j += 2 if regex[j] == "\\" else 1
            i, last_closed = j + 1, None
            continue
        repeat = _repeat_at(regex, i)
        if repeat is not None:
            many, unbounded, size = repeat
            if last_closed and many:
                return True
            if unbounded and inner:
                inner[-1] = True
            i, last_closed = i + size, None
            continue
        if c == "(":
            inner.append(False)
        elif c == ")" and inner:
            closed = inner.pop()
            if closed and inner:
                inner[-1] = True
            i, last_closed = i + 1, closed
            continue
        i, last_closed = i + 1, None
    return False


_BRACES = re.compile(r"\{(\d*)(,?)(\d*)\}")


def _repeat_at(regex: str, i: int) -> tuple[bool, bool, int] | None:
    """The quantifier at ``regex[i]``: (repeats more than once, unbounded, its length), else None."""
    c = regex[i]
    if c in "+*":
        size = 2 if i + 1 < len(regex) and regex[i + 1] in "?+" else 1
        return True, True, size
    if c == "{":
        m = _BRACES.match(regex, i)
        if m is None:
            return None
        low, comma, high = m.group(1), m.group(2), m.group(3)
        unbounded = bool(comma) and not high
        many = unbounded or (int(high or low or "0") > 1)
        return many, unbounded, m.end() - i
    return None


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
