"""Every example in README.md runs as written, in order, in one fresh repository.

The blocks are read from README.md itself (no copies). What counts as an example, by fence:

- ``python``: each block is a script of its own, run by a fresh interpreter (so each block imports
  what it uses); the CrewAI block runs in ``.venv-crewai`` (tests_crewai/test_crewai.py);
- ``console``: every ``$ `` line is a command, run by ``bash`` in the repository, which must exit 0
  (the other lines are sample output; ids in it differ from run to run). ``git agentos view`` serves
  until stopped: it must print its address, then it is stopped;
- ``sh``: the block is one ``bash -e`` script, or line by line when a line starts a server;
  a block of benchmark commands (``.venv/bin/python scripts/bench_*.py``, run from this checkout
  for minutes) is checked by name: each script exists and a smoke test under tests/ runs it;
- ``yaml``: a CI job; each ``run:`` line is a command as in ``console``;
- a fence without a language is sample output, not an example.

The README's first two blocks are the install-and-demo command and the test command: the second is
what ``.ci/run`` runs, and the first's demo runs from a wheel install in tests/test_install.py.

The fresh repository has one commit (``src/app.py``, ``README``) and a bare repository as its remote
``origin``, as a reader's clone would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)
SERVERS = ("git agentos view",)  # commands that serve until stopped
OTHER_VENV = ("### CrewAI",)  # sections whose blocks run in another environment (see the module doc)


@dataclass(frozen=True)
class Block:
    """One fenced block of README.md: its language, text, first line number and section heading."""

    lang: str
    text: str
    line: int
    section: str


def blocks() -> list[Block]:
    """Every fenced block of README.md, in order."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        headings = re.findall(r"^(#+ .*)$", before, re.M)
        found.append(Block(match.group(1), match.group(2), before.count("\n") + 1,
                           headings[-1] if headings else ""))
    return found


def examples() -> list[Block]:
    """The blocks this test runs: every example after the first two commands, minus other venvs."""
    return [b for b in blocks()[2:] if b.lang in ("python", "console", "sh", "yaml") and b.section not in OTHER_VENV]


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    first, second = blocks()[:2]
    assert "pip install" in first.text and "git agentos demo" in first.text
    assert second.text.strip() == "bash scripts/test.sh"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/test.sh" in ci


def test_every_fence_is_a_known_kind() -> None:
    kinds = {b.lang for b in blocks()}
    assert kinds <= {"", "python", "console", "sh", "yaml"}, kinds
    assert {"python", "console", "sh"} <= kinds
    assert any(b.section in OTHER_VENV for b in blocks())


def _is_server(command: str) -> bool:
    return command.strip().startswith(SERVERS) and "--html" not in command


def _bench_scripts(block: Block) -> list[str]:
    """The scripts a block of benchmark commands names, or [] when it is not one."""
    lines = [line for line in block.text.splitlines() if line.strip()]
    names = [re.match(r"\.venv[-\w]*/bin/python scripts/(bench_\w+\.py)\b", line) for line in lines]
    return [m.group(1) for m in names if m] if all(names) else []


def _commands(block: Block) -> list[str]:
    if block.lang == "sh" and any(_is_server(line) for line in block.text.splitlines()):
        return [line for line in block.text.splitlines() if line.strip()]
    if block.lang == "console":
        return [line[2:] for line in block.text.splitlines() if line.startswith("$ ")]
    if block.lang == "yaml":
        return [m.group(1) for m in re.finditer(r"^\s*- run: (.*)$", block.text, re.M)]
    return [block.text]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "AGENTOS_"))}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", BROWSER="true", PAGER="cat", GIT_PAGER="cat",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               GIT_AUTHOR_NAME="Reader", GIT_AUTHOR_EMAIL="reader@example.com",
               GIT_COMMITTER_NAME="Reader", GIT_COMMITTER_EMAIL="reader@example.com")
    return env


def _fresh_repository(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    env = _env(home)
    repo = tmp_path / "project"
    remote = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True, env=env)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("print('hello')\n")
    (repo / "README").write_text("a project\n")
    for args in (["add", "-A"], ["commit", "-q", "-m", "initial"], ["remote", "add", "origin", str(remote)]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo, env


def _serve(command: str, repo: Path, env: dict[str, str]) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_readme_example_runs_as_written(tmp_path: Path) -> None:
    repo, env = _fresh_repository(tmp_path)
    ran = 0
    for block in examples():
        if block.lang == "python":
            script = tmp_path / f"readme-line-{block.line}.py"
            script.write_text(block.text, encoding="utf-8")
            done = subprocess.run([sys.executable, str(script)], cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"README.md:{block.line} ({block.section})\n{done.stdout}\n{done.stderr}"
            ran += 1
            continue
        if _bench_scripts(block):
            for name in _bench_scripts(block):
                assert (ROOT / "scripts" / name).is_file(), name
                smoke = [t for t in ROOT.joinpath("tests").rglob("test_*smoke*.py") if name in t.read_text()]
                assert smoke, f"README.md:{block.line}: no smoke test runs scripts/{name}"
                ran += 1
            continue
        for command in _commands(block):
            if _is_server(command):
                _serve(command.split("#")[0].strip(), repo, env)
                ran += 1
                continue
            done = subprocess.run(["bash", "-e", "-c", command], cwd=repo, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert done.returncode == 0, (f"README.md:{block.line} ({block.section}): {command}\n"
                                          f"{done.stdout}\n{done.stderr}")
            ran += 1
    assert ran >= 20


def test_the_python_example_does_what_its_comments_say(tmp_path: Path) -> None:
    """The first Python block, alone in a fresh repository: its rollback moved main back to the
    plan checkpoint and its undo moved it forward again, so main ends at the edit's checkpoint, with
    the edit node recorded and both moves in main's reflog."""
    repo, env = _fresh_repository(tmp_path)
    block = next(b for b in examples() if b.lang == "python")
    script = tmp_path / "example.py"
    script.write_text(block.text, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    import gitstate

    run = gitstate.open_store(repo).get_run("issue-78")
    plan, edit = run.load("node:plan"), run.load("node:edit")
    assert run.head().id == edit.id and edit.state == {"messages": ["patched"]}
    assert [cp.id for cp in run.history()] == [edit.id, plan.id]
    assert [(b.node, b.entry, b.exit, b.status) for b in run.nodes()] == [("edit", edit.id, edit.id, "completed")]
    undo, rollback = [entry.message for entry in run.store.reflog(run.ref("main"))][:2]  # newest first
    assert rollback.startswith("gitstate: rollback to " + plan.short_id) and "undo" in undo, (rollback, undo)
