"""The secret scanner (gitstate.secrets), ``git agentos scan`` and the push refusal: recall on a
labelled corpus of every kind placed in LangGraph messages, tool outputs and nested state; no
finding on 10,000 git ids, UUIDs, base64 blobs and prose sentences; nothing reaches a remote when a
checkpoint it would receive holds a credential; the allowlist lets a known one through."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import string
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_repo
from remote_helpers import bare

import gitstate
from gitstate.secrets import Rules, Scanner, SecretsRuleError, fingerprint

RNG = random.Random(30)
ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt() -> str:
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": rand(8), "iat": RNG.randrange(10**9)}).encode())
    return f"{head}.{body}.{b64url(RNG.randbytes(32))}"


def pem(label: str) -> str:
    body = "\n".join(base64.b64encode(RNG.randbytes(48)).decode() for _ in range(6))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def corpus() -> list[tuple[str, str]]:
    """(kind, secret) pairs: several random ones of each kind."""
    out: list[tuple[str, str]] = []
    upper = string.ascii_uppercase + string.digits
    for _ in range(5):
        out += [
            ("aws-access-key", "AKIA" + rand(16, upper)), ("aws-access-key", "ASIA" + rand(16, upper)),
            ("github-token", "ghp_" + rand(36)), ("github-token", "gho_" + rand(36)),
            ("github-token", f"github_pat_{rand(22)}_{rand(59)}"),
            ("openai-api-key", "sk-" + rand(48)), ("openai-api-key", "sk-proj-" + rand(64, ALNUM + "_-") + "a1"),
            ("anthropic-api-key", "sk-ant-api03-" + rand(93, ALNUM + "_-") + "AA"),
            ("slack-token", f"xoxb-{RNG.randrange(10**11)}-{RNG.randrange(10**12)}-{rand(24)}"),
            ("slack-token", f"xoxp-{RNG.randrange(10**11)}-{RNG.randrange(10**12)}-{rand(32).lower()}"),
            ("stripe-key", "sk_live_" + rand(24)), ("stripe-key", "rk_live_" + rand(24)),
            ("google-api-key", "AIza" + rand(35, ALNUM + "_-")),
            ("supabase-secret-key", "sb_secret_" + rand(32, ALNUM + "_-")),
            ("jwt", jwt()),
            ("private-key", pem("RSA PRIVATE KEY")), ("private-key", pem("OPENSSH PRIVATE KEY")),
            ("private-key", pem("PRIVATE KEY")), ("private-key", pem("EC PRIVATE KEY")),
        ]
    return out


URLS = [f"postgres://app:{rand(14)}@db.internal:5432/app", f"mongodb+srv://admin:{rand(12)}@cluster0.example.net/x",
        f"redis://:{rand(16)}@cache:6379/0", f"https://deploy:{rand(10)}!x@git.example.com/repo.git",
        f"amqp://guest:{rand(12)}@rabbit:5672/"]
CONN = f"Server=tcp:sql.example.net,1433;Database=app;User ID=admin;Password={rand(12)};Encrypt=True;"


def placements(secret: str) -> list[tuple[dict[str, Any], str]]:
    """The secret in a LangGraph-like message list, a tool output, nested state: (state, key path)."""
    return [
        ({"messages": [{"type": "human", "content": "hi"}, {"type": "ai", "content": f"use {secret} for this"}]},
         "messages[1].content"),
        ({"tool_calls": [{"name": "env", "output": f"HOME=/root\nAPI_KEY={secret}\nPATH=/usr/bin"}]},
         "tool_calls[0].output"),
        ({"config": {"deploy": {"targets": [{"cred": json.dumps({"token": secret})}]}}},
         "config.deploy.targets[0].cred"),
        ({"blob": secret.encode()}, "blob"),
    ]


def test_recall_on_the_labelled_corpus() -> None:
    scanner = Scanner()
    cases = corpus() + [("url-password", u) for u in URLS] + [("connection-string-password", CONN)]
    missed = []
    for kind, secret in cases:
        for state, path in placements(secret):
            found = {(f.path, f.kind) for f in scanner.scan_value(state)}
            if (path, kind) not in found:
                missed.append((kind, path, found))
    assert missed == []


def negatives() -> list[str]:
    rng = random.Random(7)
    words = ("the agent token key password secret read file wrote sk-learn model commit branch user said "
             "please check https://example.com:8080/docs and git@github.com:org/repo.git then retry at "
             "ssh://git@host/path value=42 AKIA ghp sb_secret eyJ base64 id uuid hash").split()
    out = []
    for i in range(10_000):
        out.append(hashlib.sha1(str(i).encode()).hexdigest())
        out.append(hashlib.sha256(str(i).encode()).hexdigest())
        out.append(str(uuid.UUID(int=rng.getrandbits(128))))
        out.append(base64.b64encode(rng.randbytes(rng.randint(20, 600))).decode())
        out.append("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n" + rng.randbytes(rng.randint(50, 600))).decode())
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(5, 30))).capitalize() + ".")
        if i % 10 == 0:  # base64 after the escapes and separators a key may follow
            blob = base64.b64encode(rng.randbytes(rng.randint(100, 900))).decode()
            out.append(json.dumps({"img": "data:image/png;base64,\n" + blob, "b": "a\t" + blob}))
            out.append("/" + blob + "+" + blob)
            out.append("data:image/png;base64," + blob.replace("+", "%2B").replace("/", "%2F"))
            out.append("\n".join(blob[j:j + 64] for j in range(0, len(blob), 64)))
    out += PLACEHOLDERS + ["xoxo-see-you-in-2024 love mom", "Great party! xoxo-Jen2023-forever",
                           "xoxo-2024-see-you-soon", "xoxo-2024-supercalifragilisticexpialidocious",
                           "stock ticker sk-hynix-2024-earnings-q3-report", "/home/u/.cache/sk-learn-models-2024-v1/x",
                           "OPENAI_API_KEY=sk-your-api-key-here-1234567890"]
    return out


def test_no_false_positive_on_ids_images_and_prose() -> None:
    scanner = Scanner()
    hits = [text[:60] for text in negatives() if scanner.find(text)]
    assert hits == []


SLACK = [f"xoxe-1-{rand(140)}", f"xoxe.xoxp-1-{rand(140)}", f"xoxa-2-{RNG.randrange(10**11)}-{rand(40)}",
         f"xoxr-{RNG.randrange(10**11)}-{rand(30)}", f"xoxs-{RNG.randrange(10**11)}-{RNG.randrange(10**11)}-{rand(24)}",
         f"xoxo-{RNG.randrange(10**11)}-{rand(24)}", f"xapp-1-A{rand(10).upper()}-{RNG.randrange(10**12)}-{rand(64).lower()}"]


def escaped_contexts(secret: str) -> list[str]:
    """A secret right after a JSON escape, a percent escape, and (but for the prefixes that base64
    text may hold: ``AKIA``, ``ASIA``, ``AIza``) after ``+`` and as a URL's user."""
    out = [json.dumps({"stdout": f"loaded\n{secret}\ndone"}), json.dumps({"out": f"a\t{secret}"}),
           json.dumps({"q": f'say "{secret}"'}), f"Authorization%3A%20Bearer%20{secret}",
           json.dumps({"k": f"\u00a0{secret}"}, ensure_ascii=True)]
    if not secret.startswith(("AKIA", "ASIA", "AIza")):
        out += [f"q=Bearer+{secret}", f"git clone https://{secret}@github.com/o/r.git"]
    return out


@pytest.mark.parametrize("kind", ["every-kind", "slack"])
def test_recall_after_escapes_and_in_urls(kind: str) -> None:
    """No token character may come right before a key, but the end of an escape may."""
    policy_scanner = Scanner()
    secrets = [s for k, s in corpus() if k != "private-key"][:19] if kind == "every-kind" else SLACK
    leaked = []
    for secret in secrets:
        for text in escaped_contexts(secret) + [f"SLACK_TOKEN={secret}"]:
            out = policy_scanner.redact(text)[0]
            if secret in out or secret[-16:] in out:
                leaked.append(text[:80])
    assert leaked == []


PASSWORDS = [
    ("postgres://admin:%40Xk9fQ2mZ7vLp@db.example.com:5432/prod", "%40Xk9fQ2mZ7vLp"),
    ("mysql://root:$ecretP4ssw0rd!@127.0.0.1:3306/app", "$ecretP4ssw0rd!"),
    ("redis://default:[Zq8vT3pL9x@redis.local:6379", "[Zq8vT3pL9x"),
    ("amqp://svc:{Zq8vT3pL9xW}@mq:5672", "{Zq8vT3pL9xW}"),
    ("https://bob:<Zq8vT3pL9xW@host.com/x", "<Zq8vT3pL9xW"),
    ("postgres://u:ab/cd9Zk2pQ@db.host/app", "ab/cd9Zk2pQ"),
    ("postgres://u:ab#cd9Zk2pQ@db.host/app", "ab#cd9Zk2pQ"),
    ("postgres://u:p@ss9Zk2pQ@db.host/app", "p@ss9Zk2pQ"),
    ("jdbc:postgresql://db:5432/app?user=admin&password=Zq8vT3pL9xWq", "Zq8vT3pL9xWq"),
    ("jdbc:sqlserver://db:1433;databaseName=app;user=sa;password=Zq8vT3pL9xWq;", "Zq8vT3pL9xWq"),
    ("Server=db;Database=x;User Id=sa;Password='Zq8vT3pL9xWq';", "Zq8vT3pL9xWq"),
    ('Server=db;Database=x;User Id=sa;Password="Zq8v;T3pL9xWq";', "Zq8v;T3pL9xWq"),
    ("Password=Zq8vT3pL9xWq;Server=db;User Id=sa;", "Zq8vT3pL9xWq"),
    ("host=db.internal port=5432 dbname=app user=svc password=Zq8vT3pL9xWq sslmode=require", "Zq8vT3pL9xWq"),
    ("conn = psycopg.connect(host='db', password='Zq8vT3pL9xWq')", "Zq8vT3pL9xWq"),
]
PLACEHOLDERS = ["postgres://user:${PGPASSWORD}@db:5432/app", "postgres://user:$PGPASSWORD@db/app",
                "DATABASE_URL=postgres://user:<password>@host/db", "postgres://u:<your password>@h/db",
                "postgres://u:{password}@h/db", "postgres://u:{{ db_password }}@h/db", "postgres://u:[password]@h/db",
                "postgres://u:%(password)s@h/db", "postgres://u:{0}@h/db", "mysql://root:****@localhost",
                "postgres://u:xxxx@h/db", "http://localhost:5173/@vite/client", "ldap://cn=admin,dc=example:389@x",
                "https://example.com:8443/a/@user/profile", "user=admin password=${DB_PASSWORD} host=db",
                "conn = connect(host=h, password=os.environ['PW'])", "connect(host=HOST, password=PASSWORD)",
                "password = 'hunter2'  # no connection on this line"]


@pytest.mark.parametrize(("text", "secret"), PASSWORDS)
def test_passwords_in_urls_and_connection_strings(text: str, secret: str) -> None:
    out = Scanner().redact(text)[0]
    assert secret not in out and "\u00abredacted:" in out


def test_placeholders_are_not_passwords() -> None:
    scanner = Scanner()
    assert [t for t in PLACEHOLDERS if scanner.find(t)] == []


def test_redaction_replaces_the_whole_token_and_only_where_found() -> None:
    scanner = Scanner()
    # a detect-secrets plugin whose expression has a group (GitLab's, GitHub's after '_')
    for lead, token in (("", "glpat-" + rand(20)), ("MY_", "ghp_" + rand(36))):
        out = scanner.redact(f"token {lead}{token} end")[0]
        assert out.startswith(f"token {lead}\u00abredacted:") and out.endswith("\u00bb end"), out
    # replaced where it was found, not wherever the same text sits
    out = scanner.redact("postgres://postgres:postgres@localhost/postgres")[0]
    assert out.startswith("postgres://postgres:\u00abredacted:url-password:") and out.endswith("\u00bb@localhost/postgres")
    out = scanner.redact("DSN postgres://u:p@ssw0rd@db/app and p@ssw0rd")[0]
    assert out.startswith("DSN postgres://u:\u00abredacted:") and out.endswith("\u00bb@db/app and p@ssw0rd")
    # a long secret is replaced wherever it sits, though only one place matched a rule
    key = "sk_live_" + rand(24)
    assert key not in scanner.redact(f"{key} and X{key}")[0]
    # a private key cut before its END line: its whole body
    body = [base64.b64encode(RNG.randbytes(48)).decode() for _ in range(20)]
    cut = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n...(truncated)"
    out = scanner.redact(cut)[0]
    assert not any(line in out for line in body) and out.endswith("\u00bb\n...(truncated)")
    escaped = json.dumps({"out": cut})
    assert not any(line in scanner.redact(escaped)[0] for line in body)


def test_findings_never_hold_the_secret() -> None:
    secret = "sk_live_" + rand(24)
    state = {secret: {"note": secret}}
    found = Scanner().scan_value(state, "state")
    assert found and all(secret not in repr(f) for f in found)
    assert {f.fingerprint for f in found} == {fingerprint(secret)}


def test_user_rules_and_allowlist() -> None:
    allow = fingerprint("AKIAIOSFODNN7EXAMPLE")
    rules = Rules.from_toml(f'allow = ["{allow}"]\n[[pattern]]\nkind = "internal-token"\nregex = "itk_[0-9a-f]{{8}}"\n')
    found = Scanner(rules).scan_value({"a": "AKIAIOSFODNN7EXAMPLE", "b": "itk_0123abcd"})
    assert [(f.path, f.kind) for f in found] == [("b", "internal-token")]
    for bad in ("allow = [1]", "[[pattern]]\nregex = '('", "allow = ['3f2a']", "nonsense = 1", "x ="):
        with pytest.raises(SecretsRuleError):
            Rules.from_toml(bad)


@pytest.mark.parametrize("regex", ["(a+)+$", "(?:x\\\\w*)*y", "((ab+)c)+", "(a{2,}){2,5}"])
def test_a_user_pattern_that_repeats_a_repeat_is_refused_not_run(regex: str, tmp_path: Path) -> None:
    with pytest.raises(SecretsRuleError, match="repeats a group that itself repeats"):
        Rules.from_toml(f"[[pattern]]\nregex = '{regex}'\n")
    path = make_repo(tmp_path / "repo")
    (path / ".agentos-secrets.toml").write_text(f"[[pattern]]\nregex = '{regex}'\n")
    done = agentos(path, "checkpoint", "r", "--state", "-", input_text='{"a": "' + "a" * 64 + '!"}')
    assert done.returncode != 0 and "repeats a group that itself repeats" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert git(path, "for-each-ref", "refs/agentos/") == ""


def test_ordinary_user_patterns_are_kept() -> None:
    for regex in ("itk_[0-9a-f]{32}", "(ab)+", "x(a+)b(c)+", "([a+])+", "(a+)?b", "tok-(?:[A-Z]{4}-){3}[0-9]+"):
        assert Rules.from_toml(f"[[pattern]]\nregex = '{regex}'\n")


BIN = Path(sys.executable).parent


def agentos(cwd: Path, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False,
                          input=input_text, timeout=60)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "warn")  # stored as written (the default redacts)
    store = gitstate.open_store(path)
    run = store.create_run(run_id="leaky")
    run.checkpoint({"messages": [{"content": "hello"}]})
    run.checkpoint({"messages": [{"content": "hello"}, {"content": "key AKIAIOSFODNN7EXAMPLE here"}]},
                   tools=[{"name": "env", "output": "DATABASE_URL=postgres://u:hunter22x@db/app"}])
    run.checkpoint({"messages": []})  # the tip is clean: only an older checkpoint holds secrets
    store.create_run(run_id="clean").checkpoint({"messages": [{"content": "nothing here"}]})
    store.close()
    return path


def test_scan_cli_prints_where_and_exits_1(repo: Path) -> None:
    out = agentos(repo, "scan")
    assert out.returncode == 1, out.stderr
    assert "AKIAIOSFODNN7EXAMPLE" not in out.stdout + out.stderr and "hunter22x" not in out.stdout + out.stderr
    lines = out.stdout.splitlines()[1:]
    assert {tuple(line.split()[2:4]) for line in lines} == {("state.messages[1].content", "aws-access-key"),
                                                            ("tools[0].output", "url-password")}
    doc = json.loads(agentos(repo, "scan", "--json", "leaky").stdout)
    assert doc["checkpoints"] == 3 and len(doc["findings"]) == 2
    assert agentos(repo, "scan", "clean").returncode == 0
    allow = [a for f in doc["findings"] for a in ("--allow-secret", f["fingerprint"])]
    assert agentos(repo, "scan", *allow).returncode == 0
    assert agentos(repo, "scan", "nope").returncode == 1


def test_scan_finds_a_secret_in_a_langgraph_thread(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    path = make_repo(tmp_path / "lg")
    git(path, "config", "agentos.secrets", "warn")
    saver = GitCheckpointSaver(gitstate.open_store(path))
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    messages: list[dict[str, Any]] = []
    version: Any = None
    secret = "sb_secret_" + rand(32)
    for i in range(6):
        messages = [*messages, {"role": "tool", "content": f"step {i}" + (f" {secret}" if i == 3 else "")}]
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": version})
    saver.put_writes(config, [("messages", [{"content": "ghp_" + rand(36)}])], task_id="task-x")
    saver.store.close()
    doc = json.loads(agentos(path, "scan", "--json").stdout)
    found = {(f["path"], f["kind"]) for f in doc["findings"]}
    assert ("state.messages[3].content", "supabase-secret-key") in found
    assert any(p.startswith("langgraph.writes") and k == "github-token" for p, k in found)


def test_push_refused_and_nothing_reaches_the_remote(repo: Path, tmp_path: Path) -> None:
    remote = bare(tmp_path / "remote.git")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "config", "agentos.pushRemotes", "origin")
    out = agentos(repo, "push", "origin")
    assert out.returncode == 1
    assert "refused" in out.stderr and "aws-access-key" in out.stderr and "AKIAIOSFODNN7EXAMPLE" not in out.stderr
    assert git(remote, "for-each-ref") == ""
    assert git(remote, "count-objects").startswith("0 objects")
    # a clean run alone goes; then the allowlist lets the known ones through
    assert agentos(repo, "push", "origin", "clean").returncode == 0
    fps = [f["fingerprint"] for f in json.loads(agentos(repo, "scan", "--json").stdout)["findings"]]
    git(repo, "config", "agentos.secrets.allow", fps[0])
    assert agentos(repo, "push", "origin").returncode == 1
    out = agentos(repo, "push", "origin", "--allow-secret", fps[1])
    assert out.returncode == 0, out.stderr
    assert "leaky" in git(remote, "for-each-ref")


def test_rules_file_in_the_work_tree(repo: Path) -> None:
    fps = [f["fingerprint"] for f in json.loads(agentos(repo, "scan", "--json").stdout)["findings"]]
    (repo / ".agentos-secrets.toml").write_text(f"allow = {json.dumps(fps)}\n")
    assert agentos(repo, "scan").returncode == 0
    (repo / ".agentos-secrets.toml").write_text("[[pattern]]\nregex = 'hello'\n")
    out = agentos(repo, "scan", "--json")
    assert {f["kind"] for f in json.loads(out.stdout)["findings"]} >= {"custom"}
    (repo / ".agentos-secrets.toml").write_text("allow = [")
    out = agentos(repo, "scan")
    assert out.returncode == 1 and out.stderr.startswith("error: secret rules in") and "Traceback" not in out.stderr


def test_scan_reads_each_writes_ref_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan lists a run's LangGraph writes refs and decodes each blob once, not once per
    checkpoint (which made a scan of N checkpoints cost N times the writes refs)."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.format import lgwrites
    from gitstate.git.refs import list_refs
    from gitstate.langgraph import GitCheckpointSaver
    from gitstate.sync.secretscan import checkpoints_between, scan_checkpoints

    path = make_repo(tmp_path / "lg")
    git(path, "config", "agentos.secrets", "warn")
    store = gitstate.open_store(path)
    saver = GitCheckpointSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    configs = []
    version: Any = None
    for i in range(6):
        version = saver.get_next_version(version, None)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": [f"step {i}"]}
        cp["channel_versions"] = {"messages": version}
        config = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}}, {"messages": version})
        configs.append(config)
    tokens = ["ghp_" + rand(36) for _ in configs]
    for n, (cfg, token) in enumerate(zip(configs, tokens, strict=True)):  # after every put: the refs stay
        saver.put_writes(cfg, [("messages", [{"content": token}])], task_id=f"task-{n}")
    decoded = []
    real = lgwrites.decode_pending

    def counting(data: bytes, oid: str) -> Any:
        decoded.append(oid)
        return real(data, oid)

    monkeypatch.setattr(lgwrites, "decode_pending", counting)
    oids = checkpoints_between(store, [oid for _name, oid in list_refs(store.repo, "refs/agentos/")])
    found = scan_checkpoints(store, oids, Scanner())
    assert len(oids) == 6 and len(decoded) == len(set(decoded)) == 6
    assert {f.fingerprint for f in found if f.path.startswith("langgraph.writes")} == {fingerprint(t) for t in tokens}
