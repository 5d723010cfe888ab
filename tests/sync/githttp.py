"""git's smart-HTTP server for the tests: ``git http-backend`` behind a small web server on
127.0.0.1, and bare repositories it serves whose ``pre-receive`` hook can refuse pushes.

Why a Python web server and not lighttpd + fcgiwrap or Apache: neither is installed on the
project's machines, and Debian packages come only through the project's own install scripts. The
web server is not what is under test: ``git http-backend`` is the program every git hosting
setup (cgit, Gitea's and GitLab's own HTTP fronts aside) runs to speak git's smart protocol over
HTTP, and here it is the same binary, run once per request as a CGI program with the CGI
variables a web server sets (including ``GIT_PROTOCOL`` for protocol v2, so fetches send ref
prefixes as they do to GitHub). The front only decodes chunked request bodies (git sends large
pushes chunked) and passes bytes through, so the client sees exactly what ``http-backend``
answers: its refusals, its ref advertisement (every ref, to every push), its HTTP status lines.

Run it as ``python githttp.py ROOT PORT`` (the tests and ``scripts/bench_push.py`` start it
with :func:`http_git_server`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

#: The pre-receive hook every served repository gets. It refuses a push of more ref updates than
#: the number in ``$GIT_DIR/max-ref-updates`` (when that file exists) and a push updating a ref
#: listed in ``$GIT_DIR/refuse-refs``; each push it accepts appends its number of updates to
#: ``$GIT_DIR/accepted-pushes``. A ``pre-receive.more`` hook (when executable) runs after it.
PRE_RECEIVE = r"""#!/bin/sh
input=$(cat)
count=$(printf '%s\n' "$input" | grep -c .)
if [ -f "$GIT_DIR/max-ref-updates" ]; then
    limit=$(cat "$GIT_DIR/max-ref-updates")
    if [ "$count" -gt "$limit" ]; then
        echo "server: refusing a push of $count ref updates (more than $limit)" >&2
        exit 1
    fi
fi
if [ -f "$GIT_DIR/refuse-refs" ]; then
    bad=$(printf '%s\n' "$input" | awk '{print $3}' | grep -Fx -f "$GIT_DIR/refuse-refs" | head -n 1)
    if [ -n "$bad" ]; then
        echo "server: refusing $bad" >&2
        exit 1
    fi
fi
if [ -x "$GIT_DIR/hooks/pre-receive.more" ]; then
    printf '%s\n' "$input" | "$GIT_DIR/hooks/pre-receive.more" || exit $?
fi
exit 0
"""

#: Runs after the refs moved: appends the number of refs a push updated to
#: ``$GIT_DIR/accepted-pushes`` and each updated ref's name to ``$GIT_DIR/updated-refs``.
POST_RECEIVE = r"""#!/bin/sh
input=$(cat)
printf '%s\n' "$input" | grep -c . >> "$GIT_DIR/accepted-pushes"
printf '%s\n' "$input" | awk 'NF == 3 {print $3}' >> "$GIT_DIR/updated-refs"
"""


#: ``<root>/http-bytes.log``: one line ``<request body bytes> <response body bytes>`` per request
BYTES_LOG = "http-bytes.log"


def bytes_moved(root: Path) -> int:
    """The request and response body bytes of every request the server at ``root`` answered."""
    log = root / BYTES_LOG
    if not log.exists():
        return 0
    return sum(int(n) for n in log.read_text().split())


def served_repo(root: Path, name: str, *, max_updates: int | None = None) -> Path:
    """A fresh bare repository ``root/name`` served over HTTP: receive-pack on, partial fetches
    allowed (``uploadpack.allowFilter``), the refusing pre-receive hook installed."""
    path = root / name
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    for key, value in (("http.receivepack", "true"), ("uploadpack.allowFilter", "true"),
                       ("uploadpack.allowAnySHA1InWant", "true")):
        subprocess.run(["git", "-C", str(path), "config", key, value], check=True)
    for name, script in (("pre-receive", PRE_RECEIVE), ("post-receive", POST_RECEIVE)):
        hook = path / "hooks" / name
        hook.write_text(script)
        hook.chmod(0o755)
    if max_updates is not None:
        (path / "max-ref-updates").write_text(f"{max_updates}\n")
    return path


def accepted_pushes(repo: Path) -> list[int]:
    """The number of refs each push the server accepted updated, in order."""
    log = repo / "accepted-pushes"
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def updated_refs(repo: Path) -> list[str]:
    """Every ref an accepted push updated, once per update, in order."""
    log = repo / "updated-refs"
    return log.read_text().split() if log.exists() else []


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One smart-HTTP server for the session: ``(root, base URL)``; make repositories with
    :func:`served_repo` under ``root`` and reach them at ``<base URL>/<name>``."""
    root = tmp_path_factory.mktemp("http-served")
    with http_git_server(root) as url:
        yield root, url


def _dechunk(rfile: object) -> bytes:
    read_line = rfile.readline  # type: ignore[attr-defined]
    read = rfile.read  # type: ignore[attr-defined]
    body = bytearray()
    while True:
        size = int(read_line().split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while read_line().strip():  # trailers, then the blank line
                pass
            return bytes(body)
        body += read(size)
        read_line()  # the CRLF after each chunk


class _Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = ""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._cgi(b"")

    def do_POST(self) -> None:  # noqa: N802
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _dechunk(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._cgi(body)

    def _cgi(self, body: bytes) -> None:
        url = urlsplit(self.path)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.root,
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_PROJECT_ROOT": self.root, "GIT_HTTP_EXPORT_ALL": "1",
               "REQUEST_METHOD": self.command, "PATH_INFO": url.path, "QUERY_STRING": url.query,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_USER": "tester", "REMOTE_ADDR": self.client_address[0],
               "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1"}
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        done = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env, check=False)
        raw = done.stdout
        split = raw.find(b"\r\n\r\n")
        head, rest = (raw[:split], raw[split + 4:]) if split >= 0 else (raw, b"")
        if split < 0:
            alt = raw.find(b"\n\n")
            head, rest = (raw[:alt], raw[alt + 2:]) if alt >= 0 else (b"Status: 500 no CGI header", b"")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("content-length", "transfer-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
        with open(os.path.join(self.root, BYTES_LOG), "a", encoding="ascii") as log:
            log.write(f"{len(body)} {len(rest)}\n")  # one write of a short line: appends do not mix


def serve(root: str, port: int) -> None:
    """Serve the repositories under ``root`` at ``http://127.0.0.1:<port>/`` until killed."""
    _Backend.root = root
    server = ThreadingHTTPServer(("127.0.0.1", port), _Backend)
    server.daemon_threads = True
    server.serve_forever()


@contextmanager
def http_git_server(root: Path) -> Iterator[str]:
    """Serve every repository under ``root`` over smart HTTP (see the module's docstring) in a
    process of its own; yields the base URL ``http://127.0.0.1:<port>``; the server is killed on
    exit."""
    # (imported here: this file also runs as the server, and scripts/bench_push.py imports it)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from remote_helpers import free_port, serving

    port = free_port()
    with serving([sys.executable, os.path.abspath(__file__), str(root), str(port)], port, "the HTTP git server",
                 f"http://127.0.0.1:{port}") as url:
        yield url


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
