"""The view's HTTP server: 127.0.0.1 only, its own Host/Origin only, GET/HEAD only, a strict CSP
on every answer, data only as JSON that is safe even inside HTML; and the one-file HTML of --html:
inline code allowed by hashes, data never script."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import socket
import stat
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import gitstate
from gitstate.view.server import ViewServer, make_server, safe_json
from gitstate.view.static import build, render, write_html
from gitstate_cli.main import cli

HOSTILE = "</script><script>window.PWNED=1</script> <img src=x onerror=alert(1)> javascript:alert(1) {{template}}"


@pytest.fixture
def hostile_run(store: gitstate.Store) -> gitstate.Run:
    run = store.create_run(workflow="<b>wf</b>", run_id="evil</script>", metadata={"note": HOSTILE})
    run.checkpoint({"text": HOSTILE, "\u2028key": "line\u2029sep"}, node="<svg onload=x>", metadata={"m": HOSTILE})
    run.checkpoint({"text": HOSTILE + "2"}, node="n")
    return run


@pytest.fixture
def server(store: gitstate.Store, hostile_run: gitstate.Run) -> Iterator[ViewServer]:
    srv = make_server(store).start()
    yield srv
    srv.stop()


def ask(srv: ViewServer, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    sent = {"Host": f"127.0.0.1:{srv.port}"}
    sent.update(headers or {})
    conn.request(method, path, headers=sent)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def test_binds_loopback_only(server: ViewServer) -> None:
    assert server.server_address[0] == "127.0.0.1"
    assert server.url == f"http://127.0.0.1:{server.port}/"


def test_pages_and_api_answer_with_a_strict_policy(server: ViewServer) -> None:
    for path in ("/", "/static/app.js", "/static/app.css", "/api/runs"):
        status, headers, _ = ask(server, "GET", path)
        assert status == 200, path
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert "app;dur=" in headers["server-timing"]
    status, headers, body = ask(server, "HEAD", "/api/runs")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    status, _, _ = ask(server, "GET", "/nothing")
    assert status == 404
    status, _, body = ask(server, "GET", "/api/checkpoint?id=deadbeef")
    assert status == 404 and "error" in json.loads(body)


def test_index_and_script_hold_no_data(server: ViewServer) -> None:
    _, _, page = ask(server, "GET", "/")
    assert b"<script src=\"/static/app.js\"></script>" in page
    assert b"evil" not in page and b"PWNED" not in page
    _, _, script = ask(server, "GET", "/static/app.js")
    assert b"innerHTML" not in script and b"eval(" not in script and b"document.write" not in script


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND"])
def test_only_get_and_head(server: ViewServer, method: str) -> None:
    status, headers, _ = ask(server, method, "/api/runs")
    assert status == 405 and headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1:1", "localhost.evil.example:{port}", "", "127.0.0.1"])
def test_foreign_host_is_refused(server: ViewServer, host: str) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refused."""
    status, _, body = ask(server, "GET", "/api/runs", {"Host": host.format(port=server.port)})
    assert status == 403 and b"evil" not in body and b"runs" not in body


def test_two_host_headers_or_an_absolute_target_are_refused(server: ViewServer) -> None:
    """A request naming two hosts, or another authority in its target (``GET http://other/...``,
    which HTTP says wins over Host), is not answered."""
    own = f"127.0.0.1:{server.port}"
    for first, second in ((own, "evil.example"), ("evil.example", own), (own, own)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(f"GET /api/runs HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\n"
                         "Connection: close\r\n\r\n".encode())
            reply = b"".join(iter(lambda: sock.recv(65536), b""))
        assert reply.startswith(b"HTTP/1.0 403") or reply.startswith(b"HTTP/1.1 403"), reply[:80]
    for target in ("http://evil.example/api/runs", f"http://{own}/api/runs"):
        status, _, body = ask(server, "GET", target)
        assert status == 400 and b"runs" not in body.replace(b"request target", b""), target


def test_foreign_origin_is_refused(server: ViewServer) -> None:
    for origin in ("http://evil.example", f"http://evil.example:{server.port}", "null", "https://127.0.0.1"):
        status, _, _ = ask(server, "GET", "/api/runs", {"Origin": origin})
        assert status == 403, origin
    status, _, _ = ask(server, "GET", "/api/runs", {"Sec-Fetch-Site": "cross-site"})
    assert status == 403
    status, _, _ = ask(server, "GET", "/api/runs", {"Origin": f"http://127.0.0.1:{server.port}"})
    assert status == 200
    status, _, _ = ask(server, "GET", "/api/runs", {"Host": f"localhost:{server.port}"})
    assert status == 200


def test_json_escapes_markup(server: ViewServer, hostile_run: gitstate.Run) -> None:
    tip = hostile_run.head()
    assert tip is not None
    for path in ("/api/runs", f"/api/checkpoint?id={tip.id}", f"/api/diff?a={tip.id}",
                 "/api/graph?run=evil%3C%2Fscript%3E"):
        status, headers, body = ask(server, "GET", path)
        assert status == 200, (path, body[:200])
        assert headers["content-type"].startswith("application/json")
        assert b"<" not in body and b">" not in body and b"&" not in body
        assert "\u2028".encode() not in body and "\u2029".encode() not in body
        assert "PWNED" in repr(json.loads(body))  # the text itself arrives intact


def test_safe_json() -> None:
    text = safe_json({"a": "</script>&\u2028"})
    assert text == '{"a":"\\u003c/script\\u003e\\u0026\\u2028"}'
    assert json.loads(text) == {"a": "</script>&\u2028"}


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_static_html_is_one_file_with_hashed_code_and_inert_data(store: gitstate.Store,
                                                                  hostile_run: gitstate.Run) -> None:
    html = render(build(store, [hostile_run.id]))
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp is not None
    policy = csp.group(1)
    assert "default-src 'none'" in policy and "connect-src 'none'" in policy and "unsafe" not in policy
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(scripts) == 1 and len(styles) == 1
    assert _hash(scripts[0]) in policy and _hash(styles[0]) in policy
    data = re.findall(r'<script type="application/json" id="gitstate-data">(.*?)</script>', html, re.S)
    assert len(data) == 1
    assert "<" not in data[0] and ">" not in data[0] and "&" not in data[0]
    bundle = json.loads(data[0])
    assert bundle["mode"] == "static" and bundle["graphs"][0]["id"] == "evil</script>"
    # the only markup in the file is ours: one data element, one script, one style
    assert html.count("<script") == 2 and html.count("<style") == 1 and "PWNED" not in html.replace(data[0], "")
    outside = html.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace name, never fetched
    assert "http://" not in outside and "https://" not in outside


def test_cli_writes_the_html_file(repo: Path, store: gitstate.Store, hostile_run: gitstate.Run,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    out = repo.parent / "view.html"
    res = CliRunner().invoke(cli, ["view", hostile_run.id, "--html", str(out)])
    assert res.exit_code == 0, res.output
    assert f"wrote {out}" in res.output and "2 checkpoints" in res.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    res = CliRunner().invoke(cli, ["view", "no-such-run", "--html", str(out)])
    assert res.exit_code == 1 and "no-such-run" in res.output
    res = CliRunner().invoke(cli, ["view", "a", "b"])
    assert res.exit_code == 2


def test_html_output_is_written_through_links_and_into_pipes(store: gitstate.Store, hostile_run: gitstate.Run,
                                                             tmp_path: Path) -> None:
    """``view --html`` writes as a shell's ``>`` would: through a symbolic link (the link stays), into
    a pipe or device (never replaced by a file); a path that cannot be written is one
    :class:`OutputWriteError`, with no temporary file left behind."""
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    real = tmp_path / "real.html"
    link = tmp_path / "link.html"
    link.symlink_to(real)
    write_html(store, [hostile_run.id], link)
    assert link.is_symlink() and real.read_text().startswith("<!DOCTYPE html>")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_html(store, [hostile_run.id], fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got and got[0].startswith(b"<!DOCTYPE html>")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(gitstate.OutputWriteError, match="cannot write .*afile/v.html"):
        write_html(store, [hostile_run.id], tmp_path / "afile" / "v.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "link.html", "pipe", "real.html"]


def test_static_size_grows_with_what_changed(store: gitstate.Store) -> None:
    """A growing message list costs about its messages once, not a copy per checkpoint."""
    run = store.create_run(run_id="grow")
    messages: list[str] = []
    for i in range(300):
        messages.append(f"message {i} " + "x" * 200)
        run.checkpoint({"messages": messages, "i": i})
    html = render(build(store, ["grow"]))
    assert len(html) < 300 * 210 * 3 + 600_000  # messages ~63 kB; per checkpoint ~1-2 kB of fields


def test_odd_parameters_get_an_error_answer(server: ViewServer, hostile_run: gitstate.Run) -> None:
    tip = hostile_run.head()
    assert tip is not None
    for path, expected in ((f"/api/value?id={tip.id}&path=%5B%5B1%5D%5D", 400),
                           (f"/api/value?id={tip.id}&path=not-json", 400),
                           (f"/api/value?id={tip.id}&path=%7B%7D", 400),
                           ("/api/graph", 404), ("/api/graph?run=nope", 404), ("/api/nothing", 404),
                           (f"/api/file?id={tip.id}&path=..%2F..%2Fetc%2Fpasswd", 404)):
        status, _, body = ask(server, "GET", path)
        assert status == expected, (path, status, body)
        assert "error" in json.loads(body)


@pytest.mark.parametrize("depth", [100_000, 20_000, 2_000, 65])
def test_deeply_nested_or_huge_json_parameters_get_a_400(server: ViewServer, hostile_run: gitstate.Run,
                                                         depth: int) -> None:
    """A JSON query parameter nested 100,000 deep (or just deeper than the view's limit, or too long)
    is a clear 400 with a JSON error, never a RecursionError (500); the server keeps serving."""
    tip = hostile_run.head()
    assert tip is not None
    status, headers, body = ask(server, "GET", f"/api/value?id={tip.id}&path=" + "[" * depth)
    assert status == 400, (status, body[:200])
    error = json.loads(body)["error"]
    assert "Recursion" not in error and ("too long" in error or "too deeply" in error), error
    assert "default-src 'none'" in headers["content-security-policy"]
    status, _, body = ask(server, "GET", f"/api/value?id={tip.id}&path=" + "%5B" * depth + "%5D" * depth)
    assert status == 400 and "error" in json.loads(body)
    status, _, body = ask(server, "GET", f"/api/value?id={tip.id}&path=%5B%22text%22%5D")  # ["text"]
    assert status == 200 and json.loads(body)["kind"] == "str"


def test_json_depth_ignores_brackets_in_strings() -> None:
    from gitstate.view.server import json_depth

    assert json_depth('["[[[[", "\\"[[", 1]') == 1
    assert json_depth("[[[]]]") == 3
    assert json_depth("[" * 100_000) == 100_000


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (RST) instead of an orderly close: linger on, timeout 0."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_client_that_resets_the_connection_leaves_no_traceback(server: ViewServer,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A browser tab closed mid-request resets its connection: the server carries on and prints
    no traceback in the terminal it runs in."""
    finished = threading.Semaphore(0)
    close = server.shutdown_request

    def shutdown_request(request: socket.socket) -> None:  # the last step of every connection
        close(request)
        finished.release()

    server.shutdown_request = shutdown_request  # type: ignore[method-assign]
    host = f"127.0.0.1:{server.port}"
    sends = [f"GET /api/runs HTTP/1.1\r\nHost: {host}\r\n\r\n",  # a whole request, then reset
             f"GET /api/graph?run=evil%3C%2Fscript%3E HTTP/1.1\r\nHost: {host}\r\n\r\n" * 3,
             "GET /api/runs HTTP/1.1\r\nHo",  # reset in the middle of the headers
             ""]  # reset before a byte
    for data in sends * 3:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        sock.sendall(data.encode())
        _reset(sock)
    for _ in sends * 3:
        assert finished.acquire(timeout=60)
    status, _, _ = ask(server, "GET", "/api/runs")  # still serving
    assert status == 200
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Error" not in err, err


def test_a_request_naming_its_origin_twice_is_refused(server: ViewServer) -> None:
    """Only one value of a header that says who asks is ever checked: a request holding Origin,
    Referer or Sec-Fetch-Site twice (or Host) is refused, whichever comes first."""
    own = f"http://127.0.0.1:{server.port}"
    pairs = {"Origin": (own, "http://evil.example"), "Referer": (own + "/", "http://evil.example/"),
             "Sec-Fetch-Site": ("same-origin", "cross-site")}
    for name, (good, bad) in pairs.items():
        for first, second in ((good, bad), (bad, good), (good, good)):
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{name}: {first}\r\n"
                             f"{name.lower()}: {second}\r\nConnection: close\r\n\r\n".encode())
                reply = b"".join(iter(lambda: sock.recv(65536), b""))
            assert reply.startswith(b"HTTP/1.1 403"), (name, first, second, reply[:80])
            assert b"runs" not in reply.split(b"\r\n\r\n", 1)[1], reply
    status, _, _ = ask(server, "GET", "/api/runs", {"Origin": own, "Referer": own + "/"})
    assert status == 200
