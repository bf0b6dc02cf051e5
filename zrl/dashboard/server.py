"""The dashboard's web server: the standard library's threading HTTP server, read-only, on 127.0.0.1 unless told
otherwise. It serves the page (one self-contained HTML file: no build step, no CDN), the run's state as JSON
(``/api/state``) and as server-sent events once a second (``/api/stream``), and the run folder's own text and
picture files (``/run/<path>``), never a path outside it.

Security: bound to a loopback address, it answers only requests whose Host header names a loopback host (a web
page elsewhere cannot reach it through DNS rebinding); bound to any other address it needs a token, made here and
printed once, without which every request gets 403. There is no endpoint that changes anything: any method but
GET and HEAD gets 405.

It runs in the launcher's own process, so that no client may take what the run needs (its files, its threads): at
most MAX_CONNECTIONS connections are served at once, each must have sent its whole request within
REQUEST_DEADLINE_S however slowly its bytes come, and a wrong ``?token=`` is refused on the request line alone.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from zrl.dashboard.view import RunView
from zrl.errors import ConfigError

log = logging.getLogger("zrl")

PAGE = Path(__file__).with_name("page.html")
PUSH_INTERVAL_S = 1.0  # the page's updates over /api/stream
MAX_STREAMS = 16  # open /api/stream connections at once; more get 503
SOCKET_TIMEOUT_S = 10.0  # a client that sends or takes nothing for this long is dropped
MAX_CONNECTIONS = 64  # connections served at once, streams among them; past it a new one is closed, with no thread
REQUEST_DEADLINE_S = 10.0  # from a connection's accept to its request's last header, however slowly the bytes come
IDLE_GRACE_S = 1.0  # when all are taken, one that has sent no request for this long gives its place to a new one
SERVED_SUFFIXES = {".csv", ".log", ".toml", ".json", ".png", ".svg", ".txt", ".md"}
_TYPES = {
    ".csv": "text/csv; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".toml": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}
FORBIDDEN = "forbidden: this dashboard needs its token (?token=...), printed when it started"
CSP = "Content-Security-Policy"
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    CSP: (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


def _state_json(view: RunView) -> bytes:
    """The view's state as JSON: strict (no NaN or Infinity, which a browser's JSON.parse refuses)."""
    return json.dumps(view.state(), allow_nan=False, default=str).encode()


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(ThreadingHTTPServer):
    """The threading server, keeping each open connection so that close() can end it: every handler's thread is
    joined by server_close() (block_on_close), once its socket has been shut down under it.

    A flood of connections that send nothing, or a byte now and then, must cost the launcher no more than
    MAX_CONNECTIONS files and threads (and those it hung up, for the moment their threads take to end). Past the
    cap a new connection is closed at once, unless the oldest of those still waiting for their request has waited
    IDLE_GRACE_S: that one is hung up instead, so that an idle flood cannot keep a real page out. Each turn of
    serve_forever hangs up those whose request is not read by REQUEST_DEADLINE_S. A connection carries one request
    (HTTP/1.0): once it is read, the answer is bounded by the per-write SOCKET_TIMEOUT_S, and a stream by
    MAX_STREAMS."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = MAX_CONNECTIONS  # the listen backlog: a burst waits there, not in SYN retries of a second
    view: RunView | None = None
    token: str | None = None
    closing: threading.Event
    push_interval_s: float
    streams_lock: threading.Lock
    streams: int = 0

    def server_activate(self) -> None:
        super().server_activate()
        self.open_lock = threading.Lock()
        # each open connection: when it was accepted (time.monotonic()), None once its request has been read
        self.open: dict[socket.socket, float | None] = {}

    def process_request(self, request, client_address) -> None:
        if not self._admit(request):
            self.shutdown_request(request)  # closed at once: no thread, no answer
            return
        super().process_request(request, client_address)

    def _admit(self, request) -> bool:
        """Take ``request`` into ``open`` if there is room, or if the oldest waiting connection gives up its place."""
        now = time.monotonic()
        with self.open_lock:
            if len(self.open) >= MAX_CONNECTIONS:
                waiting = [(since, conn) for conn, since in self.open.items() if since is not None]
                since, oldest = min(waiting, key=lambda item: item[0], default=(now, None))
                if oldest is None or now - since < IDLE_GRACE_S:
                    return False
                self._hang_up(oldest)
            self.open[request] = now
        return True

    def _hang_up(self, request) -> None:
        """End ``request`` under its handler (open_lock held): its read ends, its thread closes it and returns."""
        del self.open[request]
        try:
            request.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def service_actions(self) -> None:
        """Each turn of serve_forever: hang up every connection whose request is not read by the deadline."""
        late = time.monotonic() - REQUEST_DEADLINE_S
        with self.open_lock:
            for request in [conn for conn, since in self.open.items() if since is not None and since < late]:
                self._hang_up(request)

    def request_read(self, request) -> None:
        """``request`` has sent its whole request: the deadline is met, and it keeps its place while answered."""
        with self.open_lock:
            if request in self.open:
                self.open[request] = None

    def shutdown_request(self, request) -> None:
        with self.open_lock:
            self.open.pop(request, None)
        super().shutdown_request(request)

    def end_connections(self) -> None:
        """Wake every handler blocked on its socket: reads end, writes fail, and each thread returns."""
        with self.open_lock:
            for request in self.open:
                try:
                    request.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request, client_address) -> None:  # a client gone mid-answer is not an error
        log.debug("dashboard: error serving %s", client_address, exc_info=True)


class _V6Server(_Server):
    address_family = socket.AF_INET6


class Dashboard:
    """The live page of a run on ``host:port`` (0: a free port). The socket is bound at once, so that a port in
    use is a ConfigError before the run starts; ``serve(run_dir)`` starts answering, in a thread of the calling
    process; ``close()`` stops, and leaves no thread or socket behind."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, push_interval_s: float = PUSH_INTERVAL_S) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(f"--port {port}: a TCP port is 0 (a free one) to 65535")
        server_class = _V6Server if ":" in host else _Server
        try:
            self._server = server_class((host, port), _Handler)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"--port {port}: the port is in use on {host}; give another port, or --port 0 for a free one"
                ) from None
            raise ConfigError(
                f"--port {port} on {host}: cannot serve there ({err.strerror or err}); ports under 1024 need root, "
                "and the host must be an address of this machine"
            ) from None
        self._server.closing = threading.Event()
        self._server.push_interval_s = push_interval_s
        self._server.streams_lock = threading.Lock()
        self._server.token = None if is_loopback(host) else secrets.token_urlsafe(24)
        self.host, self.port = host, self._server.server_address[1]
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def token(self) -> str | None:
        return self._server.token

    @property
    def url(self) -> str:
        """The address to open, with the token where one is needed."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    @property
    def streams(self) -> int:
        return self._server.streams

    def serve(self, run_dir: str | Path) -> None:
        self._server.view = RunView(run_dir)
        self._thread = threading.Thread(target=self._server.serve_forever, name="zrl-dashboard", daemon=True)
        self._thread.start()

    def close(self, linger_s: float = 0.0) -> None:
        """Stop serving, and return once every connection and its thread is gone (again: nothing). ``linger_s``:
        first give open pages that long to take the run's last state."""
        if self._closed:
            return
        if linger_s > 0 and self._server.streams:
            time.sleep(linger_s)
        server = self._server
        server.closing.set()
        try:
            if self._thread is not None:
                server.shutdown()  # no new connection is taken
                self._thread.join()
            server.end_connections()
            server.server_close()  # joins every handler's thread
        finally:
            self._closed = True


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    raw_requestline: bytes  # the request line as read (handle_one_request sets it; typeshed leaves it out)

    def version_string(self) -> str:
        return "zrl-dashboard"

    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args) -> None:  # noqa: A002  the base class's name
        log.debug("dashboard: %s %s", self.address_string(), format % args)

    # -- answers ---------------------------------------------------------------------------------------------
    def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8", sandbox=False) -> None:
        """One answer. ``sandbox``: a run folder's own file, which may run no script (an SVG could hold one)."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in _SECURITY_HEADERS.items():
            self.send_header(key, "sandbox; default-src 'none'; img-src 'self'" if sandbox and key == CSP else value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, code: int, why: str) -> None:
        self._send(code, (why + "\n").encode())

    def parse_request(self) -> bool:
        """The request line, then the headers (the base class's), but a wrong ``?token=`` on the line is refused
        before a header is read; a request read whole is told to the server, which then stops its deadline."""
        if self._wrong_token_on_line():
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.command, self.request_version = self.requestline.split()[0], "HTTP/1.0"
            self.close_connection = True
            self._refuse(403, FORBIDDEN)
            return False
        if not super().parse_request():
            return False
        self.server.request_read(self.request)
        return True

    def _wrong_token_on_line(self) -> bool:
        token = self.server.token
        words = str(self.raw_requestline, "iso-8859-1").split()
        if token is None or len(words) < 2:
            return False
        given = parse_qs(urlsplit(words[1]).query).get("token")
        return given is not None and not hmac.compare_digest(given[0].encode(), token.encode())

    def _allowed(self, query: dict) -> bool:
        """The token, where one is needed; otherwise a loopback Host header (or none)."""
        token = self.server.token
        if token is not None:
            given = query.get("token", [""])[0]
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                given = given or auth[7:]
            return hmac.compare_digest(given.encode(), token.encode())
        host = self.headers.get("Host")
        if host is None:
            return True
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return is_loopback(name.strip("[]"))

    def do_GET(self) -> None:  # noqa: N802  the base class's name
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if not self._allowed(query):
            self._refuse(403, FORBIDDEN)
            return
        path = parts.path
        try:
            if path in ("/", "/index.html"):
                self._send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
            elif path == "/api/state":
                self._send(200, _state_json(self._view()), "application/json")
            elif path == "/api/stream":
                self._stream()
            elif path.startswith("/run/"):
                self._file(path[len("/run/") :])
            else:
                self._refuse(404, "not found")
        except OSError:
            raise  # the client went away: nothing to answer
        except Exception:  # a defect here must not cost the page its answer, nor the server its thread
            log.warning("dashboard: error answering %s", path, exc_info=True)
            self._refuse(500, "internal error (logged in the run's zrl.log)")

    do_HEAD = do_GET  # noqa: N815

    def _view(self) -> RunView:
        view = self.server.view
        assert view is not None  # serve() sets it before the server takes a request
        return view

    def _not_allowed(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815  read-only

    def _file(self, rel: str) -> None:
        """A file of the run folder: decoded once, resolved (links followed), and refused unless it lies inside
        the folder, is not hidden (the lock file) and is a text or picture file; checkpoints are not served."""
        root = self._view().path.resolve()
        try:
            rel = unquote(rel, errors="strict") if "%" in rel else rel
        except UnicodeDecodeError:
            self._refuse(400, "bad request: the path is not UTF-8")
            return
        if "\x00" in rel or "\\" in rel:
            self._refuse(403, "forbidden: outside the run folder")
            return
        try:
            target = (root / rel).resolve()
            inside = target.is_relative_to(root) and not any(p.startswith(".") for p in target.relative_to(root).parts)
            found = inside and target.suffix in SERVED_SUFFIXES and target.is_file()
            body = target.read_bytes() if found else b""
        except (OSError, RuntimeError, ValueError):  # a name too long, a loop of links, a file gone meanwhile
            inside, found = True, False
        if not inside:
            self._refuse(403, "forbidden: outside the run folder")
        elif not found:
            self._refuse(404, f"not found (served: the run folder's {', '.join(sorted(SERVED_SUFFIXES))} files)")
        else:
            self._send(200, body, _TYPES[target.suffix], sandbox=True)

    def _stream(self) -> None:
        """Server-sent events: the state once a second until the client goes or the server closes."""
        server = self.server
        with server.streams_lock:
            full = server.streams >= MAX_STREAMS
            server.streams += 0 if full else 1
        if full:
            self._refuse(503, f"too many open pages (at most {MAX_STREAMS})")
            return
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for key, value in _SECURITY_HEADERS.items():
                self.send_header(key, value)
            self.end_headers()
            if self.command == "HEAD":
                return
            self.wfile.write(b"retry: 1000\n\n")
            while not server.closing.is_set():
                self.wfile.write(b"data: " + _state_json(self._view()) + b"\n\n")
                self.wfile.flush()
                server.closing.wait(server.push_interval_s)
        except OSError:
            pass  # the page was closed, or close() shut the connection
        except Exception:  # a defect: the stream ends (the page reconnects), the server goes on
            log.warning("dashboard: error in a stream", exc_info=True)
        finally:
            self.close_connection = True
            with server.streams_lock:
                server.streams -= 1
