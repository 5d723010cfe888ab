"""gitstate.format.names and gitstate.format.refnames: the encoding of any string into one ref
component is reversible, yields only names git accepts, never collides, and decoding refuses text
the encoder could not have produced; check_name's limits; parse_ref on gitstate and foreign refs."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest
from conftest import git

import gitstate
from gitstate.errors import InvalidNameError
from gitstate.format.names import (
    MAX_COMPONENT,
    ParsedRef,
    branch_ref,
    check_name,
    decode_component,
    encode_component,
    parse_ref,
    run_info_ref,
)

SAMPLES = ["", "a", "main", "issue 78/x", "/", "//", ".", "..", "...", ".lock", "a.lock", "%", "%%", "%41",
           "%%0123", "100%", "a/b", "a/b/c", "\x00", "\x01\x1f\x7f", "tab\there", "new\nline", "~^:?*[\\",
           "@", "@{u}", "-leading", "ünïcödé", "✓ done", "😀", "\ud800", "\udfff", "a\udc80b", "\u200d",
           "HEAD", "refs/heads/main", " ", "A" * 300, "=+,@-_"]
ENCODED = re.compile(r"[A-Za-z0-9_+=,@%-]+")


@pytest.mark.parametrize("name", SAMPLES, ids=[repr(s)[:30] for s in SAMPLES])
def test_round_trip(name: str) -> None:
    enc = encode_component(name)
    assert ENCODED.fullmatch(enc), enc
    assert "/" not in enc and "." not in enc
    assert decode_component(enc) == name


def test_documented_examples() -> None:
    assert encode_component("issue 78/x") == "issue%2078%2Fx"
    assert encode_component("") == "%"
    assert encode_component("%") == "%25"
    assert encode_component("ü") == "%C3%BC"
    assert encode_component("main") == "main"
    assert encode_component("\ud800") == "%ED%A0%80"


def test_round_trip_of_every_bmp_character_and_random_strings() -> None:
    for code in range(0x10000):
        ch = chr(code)
        assert decode_component(encode_component(ch)) == ch
    rng = random.Random(1234)
    alphabet = [chr(c) for c in (*range(0, 0x80), 0xE9, 0x2603, 0xD800, 0xDFFF, 0x1F600)]
    for _ in range(2000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        assert decode_component(encode_component(name)) == name


def test_no_two_names_collide() -> None:
    names = SAMPLES + [chr(c) for c in range(0x300)] + ["a", "a/b", "a/b/c", "a%2Fb"]
    encoded: dict[str, str] = {}
    for name in set(names):
        enc = encode_component(name)
        assert encoded.setdefault(enc, name) == name, (enc, name, encoded[enc])


def test_git_accepts_every_encoded_name() -> None:
    names = [f"refs/agentos/main/runs/{encode_component(s)}/heads/{encode_component(s[::-1])}"
             for s in SAMPLES if encode_component(s) and len(encode_component(s)) < 250]
    for name in names:
        done = subprocess.run(["git", "check-ref-format", name], capture_output=True, check=False)
        assert done.returncode == 0, name


@pytest.mark.parametrize("text", [
    "%4", "%zz", "%4a", "%c3%bc", "a b", "a/b", "a.b", ".", "ü", "%C3", "%C0%80", "%FF", "%%", "a%", "%%41",
    "a\x00", "%41", "%2D", "%5F", "m%61in",  # escapes of bytes the encoder writes as themselves
])
def test_decode_refuses_text_encode_cannot_produce(text: str) -> None:
    with pytest.raises(ValueError):
        decode_component(text)


@pytest.mark.parametrize("kind", ["run id", "branch name"])
def test_check_name_limits(kind: str) -> None:
    assert check_name(kind, "x" * MAX_COMPONENT) == "x" * MAX_COMPONENT
    with pytest.raises(InvalidNameError) as info:
        check_name(kind, "x" * (MAX_COMPONENT + 1))
    assert info.value.kind == kind
    # the limit is on the encoded form: "ü" is six bytes there
    assert len(check_name(kind, "ü" * (MAX_COMPONENT // 6))) == MAX_COMPONENT // 6 * 6
    with pytest.raises(InvalidNameError):
        check_name(kind, "ü" * (MAX_COMPONENT // 6 + 1))
    with pytest.raises(InvalidNameError):
        check_name(kind, "/" * 67)  # 201 bytes once encoded
    with pytest.raises(InvalidNameError):
        check_name(kind, "")
    for bad in (None, 3, b"bytes", ["x"]):
        with pytest.raises(InvalidNameError):
            check_name(kind, bad)


def test_parse_ref_of_gitstate_refs() -> None:
    assert parse_ref(run_info_ref("main", "run 1/x")) == ParsedRef("main", "run 1/x", "run", None)
    assert parse_ref(branch_ref("wt-feature", "r", "fix/ü")) == ParsedRef("wt-feature", "r", "heads", "fix/ü")
    assert parse_ref("refs/agentos/main/runs/r/files/notes%2Fa.md") == ParsedRef("main", "r", "files", "notes%2Fa.md")
    assert parse_ref("refs/agentos/main/runs/%25/heads/%") == ParsedRef("main", "%", "heads", "")


@pytest.mark.parametrize("name", [
    "refs/heads/main", "refs/agentos-incoming/origin/1-a/main/runs/r/run", "refs/agentos/main/runs/r",
    "refs/agentos/main/runs", "refs/agentos/main/other/r/run", "refs/agentos/main/runs/bad%zz/run",
    "refs/agentos/main/runs/r/heads/bad%zz", "refs/agentos/main/runs/a.b/run", "refs/agentos/main/runs/%41/run",
    "refs/agentos/main/runs/r/heads/a/b", "refs/agentos/main/runs/r/run/x", "refs/agentos/main/runs/r/heads",
    "HEAD", "",
])
def test_parse_ref_refuses_foreign_and_malformed_refs(name: str) -> None:
    assert parse_ref(name) is None


def test_aliasing_refs_are_neither_listed_nor_passed_by_verify(store: gitstate.Store, repo: Path) -> None:
    """Refs that name run "A" or its branches in a form the encoder never writes (``%41``,
    ``heads/x/y``) are foreign: list_runs does not count them, verify reports them."""
    from gitstate.verify import verify

    cp = store.create_run(run_id="A").checkpoint({"n": 1})
    aliases = ["refs/agentos/main/runs/%41/heads/alias", "refs/agentos/main/runs/A/heads/x/y"]
    for name in aliases:
        git(repo, "update-ref", name, cp.id)
    (summary,) = gitstate.open_store(repo).list_runs()
    assert (summary.id, summary.branches) == ("A", 1)
    assert list(store.get_run("A").branches()) == ["main"]
    report = verify(gitstate.open_store(repo))
    assert sorted(p.ref for p in report.problems) == sorted(aliases)
