"""`git agentos` as a real process under real git: start-up imports, --git-dir/AGENTOS_REPO,
plain-git readability after `setup`, the demo, and the generated reference docs."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner
from conftest import git, user_snapshot

from gitstate_cli.main import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(cwd: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))
    done = subprocess.run(list(args), cwd=cwd, input=input, capture_output=True, text=True, env=full_env, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    return done


def git_out(repo: Path, *args: str) -> str:
    """Real git's stdout, undecodable bytes (raw CBOR before setup) replaced."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True, env=env)
    return done.stdout.decode("utf-8", "replace")


def test_help_and_version_do_not_import_pygit2(tmp_path: Path) -> None:
    code = ("import sys\nfrom gitstate_cli.main import main\n"
            "for argv in (['--help'], ['--version'], ['-h']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('HEAVY', sorted(m for m in ('pygit2', 'gitstate', 'cbor2') if m in sys.modules))\n")
    done = run(tmp_path, sys.executable, "-X", "importtime", "-c", code)
    assert "HEAVY []" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert imported and not any(m.split(".")[0] in ("pygit2", "gitstate", "cbor2") for m in imported)


def test_process_skips_the_final_collections(tmp_path: Path) -> None:
    """A `git agentos` process freezes what is alive when it exits, so Python's teardown does not
    run full garbage collections over click's and pygit2's objects (tens of milliseconds)."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('FROZEN', gc.get_freeze_count() > 0))\n"  # runs last
            "from gitstate_cli.main import main\n"
            "main(sys.argv[1:])\n")
    assert "FROZEN True" in run(tmp_path, sys.executable, "-c", code, "--version").stdout
    code = "import atexit, gc\natexit.register(lambda: print('FROZEN', gc.get_freeze_count() > 0))\n"
    assert "FROZEN False" in run(tmp_path, sys.executable, "-c", code).stdout  # not Python's default


def test_process_freezes_the_imports_of_its_command(repo: Path) -> None:
    """Once a `git agentos` process has imported its command, those objects are frozen out of the
    collector's passes (the command's own allocations then trigger collections over its objects
    only); the group used in-process (click's CliRunner) leaves the collector as it is."""
    code = ("import gc, sys\n"
            "from gitstate_cli.main import cli, main\n"
            "real = cli.get_command\n"
            "def spy(ctx, name):\n"
            "    command = real(ctx, name)\n"
            "    print('FROZEN', gc.get_freeze_count() > 0, 'pygit2' in sys.modules, flush=True)\n"
            "    return command\n"
            "cli.get_command = spy\n"
            "main(sys.argv[1:])\n")
    assert "FROZEN True True" in run(repo, sys.executable, "-c", code, "runs").stdout
    before = gc.get_freeze_count()
    assert CliRunner().invoke(cli, ["runs"]).exit_code == 0
    assert gc.get_freeze_count() == before


def test_real_git_subcommand(repo: Path, tmp_path: Path) -> None:
    run(repo, "git", "agentos", "checkpoint", "r", "--state", "-", "--node", "plan", input='{"msg": "hi"}')
    runs = json.loads(run(repo, "git", "agentos", "runs", "--json").stdout)
    assert [r["id"] for r in runs] == ["r"]
    sub = repo / "sub" / "dir"
    sub.mkdir(parents=True)
    assert "plan" in run(sub, "git", "agentos", "runs").stdout  # any subdirectory finds the store
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = run(elsewhere, "git", f"--git-dir={repo / '.git'}", "agentos", "runs", "--json").stdout
    assert [r["id"] for r in json.loads(out)] == ["r"]
    out = run(elsewhere, "git-agentos", "runs", "--json", env={"AGENTOS_REPO": str(repo)}).stdout
    assert [r["id"] for r in json.loads(out)] == ["r"]


def test_process_errors_are_one_line(repo: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1,")
    done = run(repo, "git", "agentos", "checkpoint", "r", "--state", str(bad), check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    done = run(repo, "git", "agentos", "show", "nope", check=False)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    done = run(outside, "git-agentos", "runs", check=False, env={"GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert done.returncode == 1 and "AGENTOS_REPO" in done.stderr and done.stderr.count("\n") == 1
    assert git(repo, "for-each-ref", "refs/agentos/") == ""


def test_a_reader_that_closes_the_pipe_ends_the_command_as_sigpipe_ends_git(repo: Path) -> None:
    import gitstate

    run_ = gitstate.open_store(repo).create_run(run_id="long")
    for i in range(600):  # more output than a pipe buffers (64 KiB): rows of some 180 characters
        run_.checkpoint({"i": i}, node="n" * 120)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for args, first in ((["log", "long"], b"ID"), (["log", "long", "--json"], b"[")):  # the JSON: one document
        proc = subprocess.Popen(["git", "agentos", *args], cwd=repo, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(1) == first[:1]
        proc.stdout.close()  # as `| head -c 1` does
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141 and err == b"", args  # git's own: killed by SIGPIPE, 128 + 13


def test_output_that_cannot_be_written_is_one_error_line(repo: Path) -> None:
    import gitstate

    gitstate.open_store(repo).create_run(run_id="r").checkpoint({"i": 1})
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for args in (["runs"], ["log", "r", "--json"]):
        with open("/dev/full", "w") as full:
            done = subprocess.run(["git", "agentos", *args], cwd=repo, env=env, stdout=full,
                                  stderr=subprocess.PIPE, text=True, check=False)
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr == "error: cannot write the output: No space left on device\n", done.stderr


def test_setup_makes_plain_git_readable(repo: Path) -> None:
    state = {"messages": [f"message number {i}" for i in range(40)], "plan": {"goal": "readable-state"}}
    first = json.loads(run(repo, "git", "agentos", "checkpoint", "r", "--state", "-", "--json",
                           input=json.dumps(state)).stdout)["id"]
    state["plan"]["goal"] = "changed-goal"
    second = json.loads(run(repo, "git", "agentos", "checkpoint", "r", "--state", "-", "--json",
                            input=json.dumps(state)).stdout)["id"]
    assert '"goal": "readable-state"' not in git_out(repo, "show", first)

    before = user_snapshot(repo)
    files_before = {p: p.stat().st_mtime_ns for p in (repo / ".git").rglob("*") if p.is_file()}
    assert "configured" in run(repo, "git", "agentos", "setup").stdout
    config = (repo / ".git" / "config").read_bytes()
    attributes = (repo / ".git" / "info" / "attributes").read_bytes()
    assert "already set up" in run(repo, "git", "agentos", "setup").stdout  # idempotent
    assert (repo / ".git" / "config").read_bytes() == config
    assert (repo / ".git" / "info" / "attributes").read_bytes() == attributes
    changed = {p.relative_to(repo / ".git").as_posix() for p in (repo / ".git").rglob("*")
               if p.is_file() and files_before.get(p) != p.stat().st_mtime_ns}
    assert changed <= {"config", "info/attributes"}, changed
    after = user_snapshot(repo)
    assert {k: v for k, v in after.items() if k != "config"} == {k: v for k, v in before.items() if k != "config"}

    shown = git_out(repo, "show", first)
    assert '"goal": "readable-state"' in shown and '"message number 39"' in shown and '"run": "r"' in shown
    assert '"goal": "changed-goal"' in git_out(repo, "diff", first, second)
    assert '+  "goal": "changed-goal"' in git_out(repo, "log", "-p", "refs/agentos/main/runs/r/heads/main")


def test_demo_runs_to_completion(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    done = run(tmp_path, "git", "agentos", "demo", "--dir", str(target))
    out = done.stdout
    for needle in ("git agentos runs", "git agentos log demo-run", "git agentos nodes demo-run", "fork",
                   "rollback", "undo", "git agentos diff", "git for-each-ref refs/agentos/", "git show",
                   "checked", "done."):
        assert needle in out, needle
    assert '"goal"' not in out and "Traceback" not in done.stderr
    assert git(target, "rev-list", "--count", "HEAD").strip() == "1"  # the user's history untouched


def test_demo_json_reads_its_own_repository_whatever_agentos_repo_names(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "demo"
    done = run(tmp_path, "git", "agentos", "demo", "--json", "--dir", str(target), env={"AGENTOS_REPO": str(repo)})
    doc = json.loads(done.stdout)
    assert doc["repository"] == str(target) and doc["checkpoints"] > 0 and "main" in doc["branches"]
    assert git(repo, "for-each-ref", "refs/agentos/") == ""  # the repository AGENTOS_REPO names is untouched


def test_demo_refuses_a_repository_it_did_not_make(repo: Path, tmp_path: Path) -> None:
    """The demo overwrites files and its run in its directory: a user's repository is refused,
    unchanged; a directory the demo made itself runs again."""
    (repo / "plan.md").write_text("my uncommitted plan\n")
    before = user_snapshot(repo)
    done = run(tmp_path, "git", "agentos", "demo", "--dir", str(repo), check=False)
    assert done.returncode == 2 and "holds a repository the demo did not make" in done.stderr
    assert "Traceback" not in done.stderr
    assert (repo / "plan.md").read_text() == "my uncommitted plan\n" and user_snapshot(repo) == before
    target = tmp_path / "demo"
    run(tmp_path, "git", "agentos", "demo", "--dir", str(target))
    again = run(tmp_path, "git", "agentos", "demo", "--dir", str(target))
    assert "done." in again.stdout


def test_every_command_has_help_and_docs_are_current() -> None:
    doc = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.help and command.help.strip(), f"{name} lacks help"
        assert command.help.strip().splitlines()[0] == COMMANDS[name].summary, name
        if not COMMANDS[name].hidden:
            assert f"## git agentos {name}\n" in doc, f"{name} missing from docs/CLI.md"
            if "--json" in [o for p in command.params for o in getattr(p, "opts", [])]:
                assert "JSON" in command.help, f"{name} --json shape undocumented"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_worktrees_are_scoped_and_all_lists_them(repo: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    run(linked, "git", "agentos", "checkpoint", "in-linked", "--state", "-", input="{}")
    run(repo, "git", "agentos", "checkpoint", "in-main", "--state", "-", input="{}")
    assert [r["id"] for r in json.loads(run(repo, "git", "agentos", "runs", "--json").stdout)] == ["in-main"]
    assert [r["id"] for r in json.loads(run(linked, "git", "agentos", "runs", "--json").stdout)] == ["in-linked"]
    every = json.loads(run(repo, "git", "agentos", "runs", "--all", "--json").stdout)
    assert sorted((r["id"], r["worktree"]) for r in every) == [("in-linked", "wt-linked"), ("in-main", "main")]
    table = run(repo, "git", "agentos", "runs", "--all").stdout
    assert table.splitlines()[0].split()[:2] == ["RUN", "WORKTREE"] and "wt-linked" in table


def test_textconv_decodes_like_the_library_and_refuses_tags(tmp_path: Path) -> None:
    import cbor2

    from gitstate.format import encoding
    from gitstate_cli.textconv import convert

    value = {"b": b"\x00\xff", "n": [1, 2.5, None, True], "big": 2**80, "s": "é"}
    assert json.loads(convert(encoding.dumps(value))) == {"b": {"$bytes": "00ff"}, "n": [1, 2.5, None, True],
                                                          "big": 2**80, "s": "é"}
    for tagged in (cbor2.dumps(cbor2.CBORTag(1, 0)), cbor2.dumps(cbor2.CBORTag(258, [1])),
                   cbor2.dumps(cbor2.CBORTag(9999, "x")), b"plain text, not cbor \xff"):
        assert convert(tagged) == tagged  # shown as the bytes they are, never turned into objects
    code = ("import sys\nfrom gitstate_cli.main import main\n"
            f"try:\n    main(['textconv', {str(tmp_path / 'p.cbor')!r}])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('pygit2', 'gitstate.store') if m in sys.modules))\n")
    (tmp_path / "p.cbor").write_bytes(encoding.dumps({"k": "v"}))
    done = run(tmp_path, sys.executable, "-c", code)
    assert '"k": "v"' in done.stdout and "HEAVY []" in done.stdout


def test_setup_textconv_works_without_the_venv_on_path(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    run(repo, "git", "agentos", "checkpoint", "r1", "--state", "-", input='{"answer": 42}')
    run(repo, "git", "agentos", "setup")
    plain_path = {**os.environ, "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(["git", "show", "refs/agentos/main/runs/r1/heads/main", "--", "state"],
                           cwd=repo, capture_output=True, text=True, env=plain_path, check=False)
    assert shown.returncode == 0, shown.stderr
    # decoded by the textconv (found by its absolute path), not shown as binary CBOR
    assert "+++ b/state/answer.cbor" in shown.stdout and "\n+42\n" in shown.stdout


def test_man_page_renders_every_command(tmp_path: Path) -> None:
    """`git agentos --help` is git's `git help agentos`: the installed man page must be readable."""
    import shutil

    page = ROOT / "docs" / "git-agentos.1"
    text = page.read_text(encoding="utf-8")
    for name, entry in COMMANDS.items():
        if not entry.hidden:
            assert f".SS git agentos {name}\n" in text, name
    if shutil.which("man") is None:
        return
    shown = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True,
                           env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100"}, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "git agentos rollback" in shown.stdout and "Usage: git agentos" in shown.stdout


def test_progress_shows_on_a_terminal_only(tmp_path: Path) -> None:
    """Long work (verify, snapshots, restores) shows progress on a terminal and nothing in pipes."""
    import shutil

    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for i in range(30):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
    piped = run(repo, "git", "agentos", "checkpoint", "r1", "--state", "-", "--files", input='{"a": 1}')
    assert "snapshotting" not in piped.stdout + piped.stderr
    if shutil.which("script") is None:
        return
    exe = str(Path(sys.executable).parent / "git-agentos")
    for command in (f"{exe} verify", f"{exe} checkpoint r1 --files", f"{exe} restore r1 --force"):
        tty = subprocess.run(["script", "-qec", command, "/dev/null"], cwd=repo, capture_output=True,
                             text=True, check=False)
        assert tty.returncode == 0, tty.stdout
        assert "Traceback" not in tty.stdout
    for i in range(30):
        (repo / f"f{i}.txt").write_text(f"changed {i}\n")  # libgit2 reports the files it has to hash
    assert "snapshotting files: " in subprocess.run(
        ["script", "-qec", f"{exe} checkpoint r1 --files", "/dev/null"], cwd=repo, capture_output=True,
        text=True, check=False).stdout
    for i in range(30):
        (repo / f"f{i}.txt").write_text(f"again {i}\n")
    shown = subprocess.run(["script", "-qec", f"{exe} restore r1~1 --force", "/dev/null"], cwd=repo,
                           capture_output=True, text=True, check=False).stdout
    assert "restoring files [" + "#" * 30 + "] 30/30" in shown  # a bar with its total
    assert "reading changed files [" in shown and "30 written, 0 deleted, 0 unchanged" in shown
    assert shown.count("\n") < 10  # a summary, not a line per file
    piped = run(repo, exe, "restore", "r1", "--force")
    assert piped.stderr == "" and piped.stdout.count("\n") == 2
