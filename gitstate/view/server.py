"""The local web server of ``git agentos view``: read-only, bound to 127.0.0.1, answering only
requests addressed to itself.

- Only ``GET`` and ``HEAD`` (anything else: 405). Only its own ``Host`` (``127.0.0.1:PORT`` or
  ``localhost:PORT``; anything else, e.g. a rebound DNS name, gets 403) and, when the browser sends
  one, its own ``Origin`` (else 403); cross-site fetches (``Sec-Fetch-Site: cross-site``) get 403.
- Every response carries a strict Content-Security-Policy (scripts and styles only from the
  server's own files, which never contain data), ``nosniff`` and no framing. Data goes to the page
  only as JSON (with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped) and is put into the page with
  DOM text APIs by ``assets/app.js``.
- Each response says how long the server took in a ``Server-Timing`` header."""

from __future__ import annotations

import json
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from gitstate.errors import GitStateError, UsageError
from gitstate.format.encoding import JSON_SURROGATE_ESCAPES
from gitstate.store.store import Store
from gitstate.view.data import ViewData, not_found

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
ASSETS = {"/": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8")}
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                 0x2028: "\\u2028", 0x2029: "\\u2029", **JSON_SURROGATE_ESCAPES}


def safe_json(value: Any) -> str:
    """JSON that is also safe inside HTML (``<``, ``>``, ``&``, U+2028/9 escaped; no NaN) and
    encodable as UTF-8 (a lone surrogate in stored text is written as its escape)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).translate(_JSON_ESCAPES)


def asset(name: str) -> bytes:
    """A file shipped in ``gitstate/view/assets``."""
    return resources.files("gitstate.view").joinpath("assets", name).read_bytes()


class ViewServer(ThreadingHTTPServer):
    """The HTTP server of the view (one :class:`ViewData` shared by its request threads)."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, data: ViewData, port: int = 0) -> None:
        self.data = data
        super().__init__(("127.0.0.1", port), ViewHandler)
        self.port = int(self.server_address[1])
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.origins = {f"http://{h}" for h in self.hosts}
        self.assets: dict[str, bytes] = {}
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address to open (``http://127.0.0.1:PORT/``)."""
        return f"http://127.0.0.1:{self.port}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (a tab closed: the connection reset, or closed
        while the answer was written) is not the view's error: nothing is printed, as for any
        request. Any other error is printed as :mod:`socketserver` does."""
        if isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return
        super().handle_error(request, client_address)

    def asset(self, name: str) -> bytes:
        """A packaged asset (read once)."""
        if name not in self.assets:
            self.assets[name] = asset(name)
        return self.assets[name]

    def start(self) -> ViewServer:
        """Serve in a background thread (tests, benchmarks); :meth:`stop` ends it."""
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="gitstate-view", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.shutdown()
        self.server_close()
        if self.thread is not None:
            self.thread.join(5)


def _int(params: dict[str, list[str]], name: str, default: int) -> int:
    try:
        return int(params[name][0])
    except (KeyError, IndexError, ValueError):
        return default


def _str(params: dict[str, list[str]], name: str) -> str | None:
    found = params.get(name)
    return found[0] if found else None


def _need(params: dict[str, list[str]], name: str) -> str:
    value = _str(params, name)
    if not value:
        raise UsageError(f"missing parameter {name!r}")
    return value


#: Bounds of a JSON-valued query parameter (``path=``: a list of keys and indexes): longer or more
#: deeply nested text is refused (400) before it is decoded, so no input can exhaust the stack or
#: the memory of the server.
MAX_JSON_PARAM = 16_384
MAX_JSON_DEPTH = 64


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings are not
    counted), found in one scan without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def json_param(params: dict[str, list[str]], name: str, default: str) -> Any:
    """A query parameter holding JSON, decoded; ``ValueError`` (a 400 answer) when it is longer than
    :data:`MAX_JSON_PARAM` characters, nested deeper than :data:`MAX_JSON_DEPTH` or not JSON."""
    text = _str(params, name) or default
    if len(text) > MAX_JSON_PARAM:
        raise ValueError(f"parameter {name!r} is too long ({len(text):,} characters; at most {MAX_JSON_PARAM:,})")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"parameter {name!r} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(text)
    except RecursionError:  # not reached after the depth check; never a 500 all the same
        raise ValueError(f"parameter {name!r} is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"parameter {name!r} is not JSON: {exc}") from None


#: Headers that say who asks: a request holding one of them more than once is refused (only the
#: first would be checked, and another server or proxy may read the other).
CHECKED_ONCE = ("Host", "Origin", "Referer", "Sec-Fetch-Site")


class ViewHandler(BaseHTTPRequestHandler):
    """One request: checks who asks, then an asset or a JSON answer from :class:`ViewData`."""

    server: ViewServer
    protocol_version = "HTTP/1.1"
    server_version = "gitstate-view"
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the view prints nothing per request."""

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler dispatches to do_<METHOD>: every method but GET/HEAD is refused.
        if name.startswith("do_"):
            return self.refuse_method
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors ``http.server`` answers itself (a malformed or over-long request line, too many
        headers …): a JSON ``{"error"}`` with the security headers, and the connection closed. A
        request line over 65,536 bytes (the limit of ``http.server``; a huge query parameter) is a
        400 that says so."""
        status = HTTPStatus(code)
        text = explain or message or status.phrase
        if status == HTTPStatus.REQUEST_URI_TOO_LONG:
            status, text = HTTPStatus.BAD_REQUEST, "request too long: the request line is over 65,536 bytes"
            self._drain_request()
        self.close_connection = True
        body = safe_json({"error": text}).encode("utf-8")
        try:
            self.send_response(status, message)
            headers = {**self.security_headers(), "Content-Type": "application/json; charset=utf-8",
                       "Content-Length": str(len(body)), "Connection": "close"}
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD" and status >= 200 and status not in (HTTPStatus.NO_CONTENT,
                                                                           HTTPStatus.NOT_MODIFIED):
                self.wfile.write(body)
        except OSError:
            pass  # the client went away

    def _drain_request(self, limit: int = 4 << 20) -> None:
        """Read (at most ``limit`` bytes of) the rest of a refused request, up to the blank line that
        ends its headers, so closing the connection does not reset it before the client has read
        the answer."""
        seen = 0
        line = self.raw_requestline
        try:
            while seen < limit:
                if seen and line in (b"\r\n", b"\n"):
                    return
                line = self.rfile.readline(65537)
                if not line:
                    return
                seen += len(line)
        except OSError:
            pass

    def refuse_method(self) -> None:
        """405 for any method but GET and HEAD (the view never changes anything)."""
        self.send_plain(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD are allowed\n", {"Allow": "GET, HEAD"})

    def do_HEAD(self) -> None:
        """As GET, without the body."""
        self.answer(head=True)

    def do_GET(self) -> None:
        """Serve an asset or an API answer."""
        self.answer(head=False)

    # -- checks -------------------------------------------------------------------------------

    def refusal(self) -> tuple[HTTPStatus, str] | None:
        """Why this request is not answered (foreign Host or Origin, cross-site), or ``None``."""
        server = self.server
        if not self.path.startswith("/"):
            # an absolute-form target (GET http://other/...) names another authority than Host
            return HTTPStatus.BAD_REQUEST, "the request target must be a path\n"
        for name in CHECKED_ONCE:  # two of them: which one would the browser have meant?
            if len(self.headers.get_all(name) or []) > 1:
                return HTTPStatus.FORBIDDEN, f"a request with more than one {name} header is refused\n"
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0].strip().lower() not in server.hosts:
            return HTTPStatus.FORBIDDEN, "this server answers only to its own address\n"
        origin = self.headers.get("Origin")
        if origin is not None and origin.strip().lower() not in server.origins:
            return HTTPStatus.FORBIDDEN, "cross-origin requests are refused\n"
        if (self.headers.get("Sec-Fetch-Site") or "").lower() == "cross-site":
            return HTTPStatus.FORBIDDEN, "cross-site requests are refused\n"
        return None

    # -- answers ------------------------------------------------------------------------------

    def security_headers(self) -> dict[str, str]:
        """Headers every response carries."""
        return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin",
                "Cache-Control": "no-store"}

    def send_body(self, status: HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None,
                  head: bool = False) -> None:
        """Send a complete response."""
        self.send_response(status)
        headers = {**self.security_headers(), "Content-Type": content_type, "Content-Length": str(len(body)),
                   **(extra or {})}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_plain(self, status: HTTPStatus, text: str, extra: dict[str, str] | None = None) -> None:
        """A short text answer (refusals)."""
        self.send_body(status, text.encode(), "text/plain; charset=utf-8", extra, head=self.command == "HEAD")

    def answer(self, head: bool) -> None:
        """Check the request, then route it."""
        started = time.perf_counter()
        refused = self.refusal()
        if refused is not None:
            self.send_plain(*refused)
            return
        url = urlsplit(self.path)
        path = url.path
        if path in ASSETS:
            name, content_type = ASSETS[path]
            body = self.server.asset(name)
            self.send_body(HTTPStatus.OK, body, content_type, self.timing(started), head)
            return
        if not path.startswith("/api/"):
            self.send_plain(HTTPStatus.NOT_FOUND, "not found\n")
            return
        params = parse_qs(url.query, keep_blank_values=True)
        status = HTTPStatus.OK
        try:
            payload = self.route(path[len("/api/"):], params)
        except KeyError:
            status, payload = HTTPStatus.NOT_FOUND, {"error": f"no such API: {path}"}
        except (GitStateError, ValueError, TypeError) as exc:
            status = HTTPStatus.NOT_FOUND if not_found(exc) else HTTPStatus.BAD_REQUEST \
                if isinstance(exc, ValueError | TypeError) else HTTPStatus.INTERNAL_SERVER_ERROR
            payload = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a bug must not leave the page without an answer
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(exc).__name__}: {exc}"}
        body = safe_json(payload).encode("utf-8")
        self.send_body(status, body, "application/json; charset=utf-8", self.timing(started), head)

    @staticmethod
    def timing(started: float) -> dict[str, str]:
        """The ``Server-Timing`` header: milliseconds spent answering."""
        return {"Server-Timing": f"app;dur={(time.perf_counter() - started) * 1000:.2f}"}

    def route(self, name: str, p: dict[str, list[str]]) -> Any:
        """The JSON answer of one API call (``KeyError``: no such call)."""
        data = self.server.data
        run, wt = _str(p, "run"), _str(p, "wt")
        if name == "runs":
            return data.runs(_str(p, "q") or "", _int(p, "cursor", 0), _int(p, "limit", 100),
                             all_worktrees=_str(p, "all") == "1")
        if name == "graph":
            return data.graph(_need(p, "run"), wt, _int(p, "offset", 0), min(_int(p, "limit", 300), 5000),
                              _str(p, "around"))
        if name == "nodes":
            return data.nodes(_need(p, "run"), wt)
        if name == "checkpoint":
            return data.checkpoint(_need(p, "id"))
        if name == "value":
            path = json_param(p, "path", "[]")
            if not isinstance(path, list) or not all(isinstance(k, str | int) and not isinstance(k, bool)
                                                     for k in path):
                raise ValueError("path must be a JSON list of keys (text) and indexes (integers)")
            return data.value(_need(p, "id"), path, _int(p, "offset", 0), _int(p, "limit", 0) or None)
        if name == "diff":
            return data.diff(_need(p, "a"), _str(p, "b") or None)
        if name == "file":
            return data.file(_need(p, "id"), _need(p, "path"))
        if name == "session-files":
            return data.session_files(_need(p, "run"), wt)
        if name == "session-file":
            return data.session_file(_need(p, "run"), _need(p, "path"), wt)
        if name == "token":
            return {"token": data.token(run, wt, all_worktrees=_str(p, "all") == "1")}
        if name == "info":
            return {"mode": "server", "worktree": data.store.worktree, "path": data.store.path}
        raise KeyError(name)


def make_server(store: Store, port: int = 0) -> ViewServer:
    """A view server for ``store`` on 127.0.0.1 (``port`` 0: a free one); not yet serving."""
    try:
        return ViewServer(ViewData(store), port)
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None


def page_url(base: str, run_id: str | None = None, worktree: str | None = None) -> str:
    """The address of the runs page, or of one run's page."""
    if run_id is None:
        return base
    fragment = "run=" + quote(run_id, safe="")
    if worktree:
        fragment += "&wt=" + quote(worktree, safe="")
    return f"{base}#{fragment}"


def serve(store: Store, run_id: str | None = None, *, port: int = 0, open_browser: bool = True,
          ready: Callable[[str], None] | None = None) -> None:
    """Serve the view of ``store`` until interrupted: bind 127.0.0.1 (``port`` 0: a free one),
    call ``ready(url)``, open the browser at it unless ``open_browser`` is false. ``run_id`` opens
    that run's page (:class:`RunNotFound` if it does not exist)."""
    if run_id is not None:
        store.get_run(run_id)
    server = make_server(store, port)
    url = page_url(server.url, run_id)
    if ready is not None:
        ready(url)
    if open_browser:
        webbrowser.open(url)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
