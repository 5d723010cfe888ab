"""The write-time secrets policy (git config ``agentos.secrets``), the pre-push hook's scan and
``scan --redact``: with the default policy no credential of a labelled mini corpus (LangGraph
messages and pending writes, tool outputs, nested state, metadata, session files) reaches any
object of ``.git``, and the graph resumes from the redacted checkpoint; ``refuse`` writes nothing;
``warn`` stores and records, and then neither ``git agentos push`` nor plain ``git push`` sends it;
a checkpoint's objects smuggled through a user commit are refused; ``scan --redact`` rewrites a
stored run clean; ``show``, ``log`` and the HTML view show markers."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from conftest import git, make_repo
from remote_helpers import bare, machine
from test_secrets import corpus

import gitstate
from gitstate.format.checkpoint import read_meta
from gitstate.secrets import Policy, SecretsPolicyError, fingerprint, marker

try:
    from langgraph.graph.message import add_messages
except ImportError:  # the tests that need LangGraph skip
    add_messages = None

BIN = Path(sys.executable).parent


class State(TypedDict):
    """The graph's state."""

    messages: Annotated[list, add_messages]
    env: dict
CORPUS = corpus()[:19] + [("url-password", "postgres://app:Zq9vLm2Kx8@db.internal:5432/app")]
TOOL_SECRET = "ghp_" + "Ab3" * 12
WRITE_SECRET = "sk_live_" + "9Xy" * 8


def agentos(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", "agentos", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          check=False, input=stdin)
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def push(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(["git", "push", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


def all_objects(path: Path) -> bytes:
    return subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=path, capture_output=True,
                          check=True).stdout


def leaked(path: Path, secrets: list[str]) -> list[str]:
    data = all_objects(path)
    return [s[:12] for s in secrets if s.encode() in data]


def graph(saver: Any) -> Any:
    """A LangGraph graph whose tool node prints the corpus into messages and nested state."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph

    def tool(state: State) -> dict[str, Any]:
        out = "\n".join(f"{kind.upper()}={secret}" for kind, secret in CORPUS)
        return {"messages": [ToolMessage(content=out, tool_call_id="call-1")],
                "env": {"deploy": {"targets": [{"cred": CORPUS[0][1]}], "url": CORPUS[-1][1]}}}

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"saw {len(state['messages'])} messages")]}

    g = StateGraph(State)
    g.add_node("tool", tool)
    g.add_node("agent", agent)
    g.add_edge(START, "tool")
    g.add_edge("tool", "agent")
    g.add_edge("agent", END)
    return g.compile(checkpointer=saver)


def write_everything(path: Path) -> None:
    """The corpus through every write path this environment has."""
    store = gitstate.open_store(path)
    run = store.create_run("w", "plain")
    run.checkpoint({"chat": {"turns": [{"content": f"key {CORPUS[2][1]} here"}]}, "blob": CORPUS[3][1].encode()},
                   tools=[{"name": "env", "output": f"TOKEN={TOOL_SECRET}"}],
                   metadata={"note": CORPUS[4][1]})
    run.files.write("notes.md", f"# notes\nuse {CORPUS[5][1]}\n", author="agent:a")
    if _has("langgraph"):
        from langchain_core.messages import HumanMessage

        from gitstate.langgraph import GitCheckpointSaver, GitStore

        saver = GitCheckpointSaver(store)
        app = graph(saver)
        config: dict[str, Any] = {"configurable": {"thread_id": "thread"}}
        app.invoke({"messages": [HumanMessage(content="hi")], "env": {}}, config)
        tip = saver.get_tuple(config)
        assert tip is not None
        saver.put_writes(tip.config, [("messages", [HumanMessage(content=f"pasted {WRITE_SECRET}")])], task_id="t1")
        GitStore(store).put(("users", "u1"), "prefs", {"api": CORPUS[6][1]})
    store.close()


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def redacted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_repo(tmp_path_factory.mktemp("policy") / "repo")
    write_everything(path)
    return path


def test_default_policy_keeps_every_secret_out_of_git(redacted: Path) -> None:
    secrets = [s for _k, s in CORPUS] + [TOOL_SECRET] + ([WRITE_SECRET] if _has("langgraph") else [])
    assert leaked(redacted, secrets) == []
    data = all_objects(redacted).decode("utf-8", "replace")
    assert "\u00abredacted:aws-access-key:" in data and "\u00abredacted:url-password:" in data
    assert agentos(redacted, "scan").returncode == 0


def test_values_keep_their_types_and_shapes(redacted: Path) -> None:
    cp = gitstate.open_store(redacted).get_run("plain").head()
    assert cp is not None
    turn = cp.state["chat"]["turns"][0]["content"]
    assert turn.startswith("key \u00abredacted:") and turn.endswith("\u00bb here")
    assert isinstance(cp.state["blob"], bytes) and cp.state["blob"].startswith(b"\xc2\xabredacted:")
    assert cp.tools[0]["output"].startswith("TOKEN=\u00abredacted:github-token:")
    policy = Policy("redact")
    value = {"t": ("a", CORPUS[0][1]), "b": bytearray(CORPUS[1][1].encode()), "n": 3, CORPUS[2][1]: None}
    out = policy.value(value, "state", [])
    assert isinstance(out["t"], tuple) and isinstance(out["b"], bytearray) and out["n"] == 3
    assert not any(CORPUS[2][1] in k for k in out)
    assert policy.value({"x": "nothing to see here at all"}, "s", []) == {"x": "nothing to see here at all"}
    assert marker("aws-access-key", "1b4bf1cb") == "\u00abredacted:aws-access-key:1b4b\u00bb"


def test_langgraph_resumes_from_the_redacted_checkpoint(redacted: Path) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage, ToolMessage

    from gitstate.langgraph import GitCheckpointSaver

    saver = GitCheckpointSaver(gitstate.open_store(redacted))
    app = graph(saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "thread"}}
    state = app.get_state(config).values
    tool = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert "\u00abredacted:" in tool.content and tool.tool_call_id == "call-1"
    assert state["env"]["deploy"]["targets"][0]["cred"].startswith("\u00abredacted:")
    out = app.invoke({"messages": [HumanMessage(content="again")]}, config)
    assert out["messages"][-1].content == f"saw {len(out['messages']) - 1} messages"
    assert isinstance(out["messages"][1], ToolMessage)


def test_show_log_and_html_show_markers(redacted: Path, tmp_path: Path) -> None:
    shown = agentos(redacted, "show", "plain").stdout + agentos(redacted, "log", "plain").stdout
    html = tmp_path / "v.html"
    assert agentos(redacted, "view", "plain", "--html", str(html)).returncode == 0
    text = shown + html.read_text(encoding="utf-8")
    assert "\u00abredacted:github-token:" in shown
    assert not [s for _k, s in CORPUS if s in text or base64.b64encode(s.encode()).decode() in text]


def test_refuse_writes_nothing(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "refuse")
    store = gitstate.open_store(path)
    run = store.create_run("w", "r")
    run.checkpoint({"ok": 1})
    before = (git(path, "for-each-ref"), sorted(all_objects(path).split(b"\n")[::2]))
    with pytest.raises(gitstate.SecretRefusedError) as info:
        run.checkpoint({"deep": {"list": [1, {"k": CORPUS[0][1]}]}})
    assert info.value.path == "state.deep.list[1].k" and info.value.kind == "aws-access-key"
    assert CORPUS[0][1] not in str(info.value)
    # the message names the fingerprint the allowlist takes (nothing was written for scan to find)
    assert f"git config --add agentos.secrets.allow {fingerprint(CORPUS[0][1])}" in str(info.value)
    with pytest.raises(gitstate.SecretRefusedError):
        run.files.write("x.txt", CORPUS[1][1], author="agent:a")
    if _has("langgraph"):
        from langgraph.checkpoint.base import empty_checkpoint

        from gitstate.langgraph import GitCheckpointSaver

        saver = GitCheckpointSaver(store)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": [{"content": CORPUS[2][1]}]}
        cp["channel_versions"] = {"messages": "1"}
        with pytest.raises(gitstate.SecretRefusedError):
            saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"source": "input"},
                      {"messages": "1"})
    assert (git(path, "for-each-ref"), sorted(all_objects(path).split(b"\n")[::2])) == before
    git(path, "config", "agentos.secrets", "sometimes")
    with pytest.raises(SecretsPolicyError):
        gitstate.open_store(path).create_run("w", "other").checkpoint({"x": 1})


def test_warn_records_and_no_push_sends_it(tmp_path: Path) -> None:
    remote = bare(tmp_path / "origin.git")
    path = machine(tmp_path / "A", remote.as_uri(), allow="origin")
    git(path, "config", "agentos.secrets", "warn")
    store = gitstate.open_store(path)
    cp = store.create_run("w", "leaky").checkpoint({"messages": [{"content": CORPUS[0][1]}]})
    meta = read_meta(store.core.reader, store.core.reader.commit(cp.id))
    assert meta["secrets"] == [{"path": "state.messages[0].content", "kind": "aws-access-key",
                                "fingerprint": meta["secrets"][0]["fingerprint"]}]
    assert gitstate.install_hooks(store).action == "installed"
    store.close()
    out = agentos(path, "push", "origin")
    assert out.returncode == 1 and "aws-access-key" in out.stderr and CORPUS[0][1] not in out.stderr
    out = push(path, "origin", "refs/agentos/*:refs/agentos/*")
    assert out.returncode != 0 and "aws-access-key" in out.stderr and CORPUS[0][1] not in out.stderr
    out = push(path, "--mirror", "origin")
    assert out.returncode != 0
    assert git(remote, "for-each-ref") == "" and git(remote, "count-objects").startswith("0 objects")
    out = agentos(path, "export", "-o", str(tmp_path / "runs.bundle"))  # a bundle leaves the machine too
    assert out.returncode == 1 and "aws-access-key" in out.stderr and not (tmp_path / "runs.bundle").exists()
    # once redacted, both go
    assert agentos(path, "scan", "--redact").returncode == 0
    assert push(path, "origin", "refs/agentos/*:refs/agentos/*").returncode == 0
    assert CORPUS[0][1].encode() not in all_objects(remote)


def test_checkpoint_objects_through_a_user_commit_are_refused(tmp_path: Path) -> None:
    remote = bare(tmp_path / "origin.git")
    path = machine(tmp_path / "A", remote.as_uri(), allow=None)
    (path / "draft.txt").write_text(f"never committed {CORPUS[1][1]}\n")
    git(path, "config", "agentos.secrets", "warn")  # (the default would store the file redacted)
    store = gitstate.open_store(path)
    cp = store.create_run("w", "r").checkpoint({"prompt": "be evil"}, files=True)
    assert gitstate.install_hooks(store).action == "installed"
    store.close()
    # the snapshot file holds the credential (warn); scan and the push check read it
    doc = agentos(path, "scan", "--json")
    assert doc.returncode == 1 and "files['draft.txt']" in doc.stdout
    tree = git(path, "rev-parse", f"{cp.id}^{{tree}}").strip()
    head = git(path, "rev-parse", "HEAD").strip()
    smuggled = git(path, "commit-tree", tree, "-p", head, "-m", "innocent").strip()
    git(path, "update-ref", "refs/heads/innocent", smuggled)
    out = push(path, "origin", "innocent")
    assert out.returncode != 0 and "refusing to push agent checkpoints" in out.stderr
    git(path, "checkout", "-q", "-b", "squashed")
    git(path, "merge", "--squash", "-q", "--allow-unrelated-histories", "refs/agentos/main/runs/r/heads/main")
    git(path, "commit", "-q", "-m", "squash")
    out = push(path, "origin", "squashed")
    assert out.returncode != 0 and "refusing to push agent checkpoints" in out.stderr
    assert git(remote, "for-each-ref") == ""
    # an ordinary branch still goes
    git(path, "checkout", "-q", "-b", "work", head)
    (path / "ok.txt").write_text("fine\n")
    git(path, "add", "ok.txt")
    git(path, "commit", "-q", "-m", "work")
    assert push(path, "origin", "work").returncode == 0


def test_redact_leaves_ids_images_and_prose_alone() -> None:
    from test_secrets import negatives

    policy = Policy("redact")
    values = negatives()[:6000]
    assert policy.value(values, "state", []) is values
    text = policy.value({"k": f"a {CORPUS[0][1]} b"}, "s", [])["k"]
    assert policy.scanner.find(text) == ()  # a marker is never a finding


def test_scan_redact_rewrites_a_langgraph_thread(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from gitstate.langgraph import GitCheckpointSaver
    from gitstate.sync.redact import redact_runs
    from gitstate.sync.secretscan import load_rules
    from gitstate.verify.checks import verify

    path = make_repo(tmp_path / "repo")
    git(path, "config", "agentos.secrets", "warn")
    store = gitstate.open_store(path)
    app = graph(GitCheckpointSaver(store))
    config: dict[str, Any] = {"configurable": {"thread_id": "thread"}}
    app.invoke({"messages": [HumanMessage(content="hi")], "env": {}}, config)
    secrets = [s for _k, s in CORPUS]
    assert leaked(path, secrets)
    done = redact_runs(store, ["thread"], load_rules(store))
    assert done.renamed and done.refs
    store.close()
    git(path, "gc", "-q", "--prune=now")
    assert leaked(path, secrets) == []
    store = gitstate.open_store(path)
    assert verify(store).ok
    app = graph(GitCheckpointSaver(store))
    out = app.invoke({"messages": [HumanMessage(content="again")]}, config)
    assert "\u00abredacted:" in out["messages"][1].content and out["messages"][-1].content.startswith("saw ")


def test_a_long_list_is_checked_again_where_it_changed() -> None:
    policy = Policy("redact")
    items = [{"content": f"message number {i} says nothing much"} for i in range(200)]
    assert policy.value({"m": items}, "state", []) == {"m": items}  # chunks now known clean
    items[150] = {"content": f"later {CORPUS[0][1]}"}
    out = policy.value({"m": items}, "state", [])
    assert out["m"][150]["content"].startswith("later \u00abredacted:aws-access-key:")
    assert out["m"][149] is items[149]


AWS = "AKIA" + "Q" * 12 + "7ZXW"


def test_run_metadata_and_a_failed_nodes_error_are_redacted(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    store = gitstate.open_store(path)
    run = store.create_run(run_id="meta", metadata={"token": TOOL_SECRET})
    with pytest.raises(RuntimeError), run.node("fetch"):
        run.checkpoint({"step": 1})
        raise RuntimeError(f"401 for key {AWS}")
    assert leaked(path, [TOOL_SECRET, AWS]) == []
    assert store.get_run("meta").metadata["token"].startswith("«redacted:")
    assert [b.status for b in run.nodes() if b.node == "fetch"] == ["failed"]
    log = all_objects(path)
    assert b"401 for key \xc2\xabredacted:" in log  # the error's text is kept, its key replaced


@pytest.mark.parametrize("depth", [198, 199, 200, 201, 260])
def test_a_deeply_nested_credential_is_never_stored(tmp_path: Path, depth: int) -> None:
    path = make_repo(tmp_path)
    run = gitstate.open_store(path).create_run(run_id="deep")
    value: Any = {"z": AWS}
    for _ in range(depth):
        value = [value]
    try:
        run.checkpoint({"a": value})
    except gitstate.GitStateError as exc:  # refused as too deep, by the policy or the encoder
        assert AWS not in str(exc)
    assert leaked(path, [AWS]) == []


def test_a_credential_in_a_key_is_not_printed_by_an_error(tmp_path: Path) -> None:
    run = gitstate.open_store(make_repo(tmp_path)).create_run(run_id="keys")
    with pytest.raises(gitstate.GitStateError) as caught:
        run.checkpoint({"bad": {AWS.encode(): 1}})
    assert AWS not in str(caught.value)
    assert leaked(tmp_path, [AWS]) == []
