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
    return out


def test_no_false_positive_on_ids_images_and_prose() -> None:
    scanner = Scanner()
    hits = [text[:60] for text in negatives() if scanner.find(text)]
    assert hits == []


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


BIN = Path(sys.executable).parent


def agentos(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
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
