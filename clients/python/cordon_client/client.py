"""The client: runs, sessions, files."""
import hashlib
import http.client
import json
import socket
import threading
import urllib.parse
from typing import Any, Callable, Dict, Iterable, List, Optional

from .errors import IntegrityError, from_response

_CHUNK = 4 << 20


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _quote(path: str) -> str:
    # Every byte but '/' is escaped, so '..' or '?' arrive as what they are.
    return urllib.parse.quote(path, safe="/")


class Client:
    """A connection to ``cordon serve``.

    ``url`` is ``http://host:port`` or ``unix:/path``. The token is given, or
    read from ``token_file`` (the daemon writes ``<state>/token``). One
    keep-alive connection is kept per thread.
    """

    def __init__(self, url: str, token: Optional[str] = None,
                 token_file: Optional[str] = None, timeout: Optional[float] = 600.0):
        if token is None and token_file is not None:
            with open(token_file) as f:
                token = f.readline().strip()
        self.url = url
        self.token = token
        self.timeout = timeout
        self._local = threading.local()

    # --- transport ---

    def _connection(self, fresh: bool = False) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            if self.url.startswith("unix:"):
                conn = _UnixConnection(self.url[5:], self.timeout)
            else:
                parsed = urllib.parse.urlsplit(self.url)
                conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _headers(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def _send(self, method: str, target: str, body: Optional[bytes] = None,
              headers: Optional[Dict[str, str]] = None) -> http.client.HTTPResponse:
        for attempt in (0, 1):
            conn = self._connection(fresh=attempt == 1)
            try:
                conn.request(method, target, body=body, headers=self._headers(headers))
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A keep-alive connection the daemon closed: once more, fresh.
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def request(self, method: str, target: str, body: Any = None,
                headers: Optional[Dict[str, str]] = None, raw: bool = False):
        """Sends a request; returns the decoded JSON (or, with ``raw``, the
        response and its bytes). Error answers raise a CordonError."""
        data = body
        extra = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            data = json.dumps(body).encode()
            extra.setdefault("Content-Type", "application/json")
        response = self._send(method, target, data, extra)
        payload = response.read()
        if response.status >= 400:
            try:
                decoded = json.loads(payload) if payload else {}
            except ValueError:
                decoded = {"error": {"code": "error", "message": payload.decode(errors="replace")}}
            raise from_response(response.status, decoded, response.getheader("Retry-After"))
        if raw:
            return response, payload
        return json.loads(payload) if payload else None

    # --- the daemon ---

    def health(self) -> Dict[str, Any]:
        return self.request("GET", "/v1/health")

    def probe(self) -> Dict[str, Any]:
        return self.request("GET", "/v1/probe")

    def metrics(self) -> str:
        _, payload = self.request("GET", "/metrics", raw=True)
        return payload.decode()

    # --- runs ---

    def run(self, argv: Optional[List[str]] = None, shell: Optional[str] = None, *,
            env: Optional[Dict[str, str]] = None, stdin: Optional[str] = None,
            stdin_bytes: Optional[bytes] = None, workspace: Optional[str] = None,
            require: Optional[Iterable[str]] = None, isolation: Optional[str] = None,
            permissive: Optional[bool] = None, limits: Optional[Dict[str, float]] = None,
            on_output: Optional[Callable[[str, str], None]] = None) -> Dict[str, Any]:
        """One command inside the boundary; returns the RunResult.

        With ``on_output(stream, text)`` the output is streamed as it arrives
        (NDJSON) and the result still returned at the end."""
        body: Dict[str, Any] = {}
        if argv is not None:
            body["argv"] = list(argv)
        if shell is not None:
            body["shell"] = shell
        if stdin_bytes is not None:
            import base64
            body["stdin_b64"] = base64.b64encode(stdin_bytes).decode()
        for key, value in (("env", env), ("stdin", stdin), ("workspace", workspace),
                           ("isolation", isolation), ("permissive", permissive),
                           ("limits", limits)):
            if value is not None:
                body[key] = value
        if require is not None:
            body["require"] = list(require)
        if on_output is None:
            return self.request("POST", "/v1/runs", body)
        return self._stream_run(body, on_output)

    def _stream_run(self, body: Dict[str, Any], on_output: Callable[[str, str], None]):
        response = self._send("POST", "/v1/runs", json.dumps(body).encode(),
                              {"Content-Type": "application/json",
                               "Accept": "application/x-ndjson"})
        if response.status >= 400:
            payload = response.read()
            raise from_response(response.status, json.loads(payload or b"{}"),
                                response.getheader("Retry-After"))
        result = None
        for line in response:
            event = json.loads(line)
            if event.get("type") == "result":
                result = event
            else:
                on_output(event["type"], event["data"])
        return result

    # --- sessions ---

    def session(self, id: Optional[str] = None, *, env: Optional[Dict[str, str]] = None,
                limits: Optional[Dict[str, float]] = None, isolation: Optional[str] = None,
                ttl_s: Optional[int] = None, fresh_workspace: Optional[bool] = None,
                require: Optional[Iterable[str]] = None,
                permissive: Optional[bool] = None) -> "Session":
        """Creates the session (or returns the live one with that id)."""
        body: Dict[str, Any] = {"kind": "shell"}
        for key, value in (("id", id), ("env", env), ("limits", limits),
                           ("isolation", isolation), ("ttl_s", ttl_s),
                           ("fresh_workspace", fresh_workspace), ("permissive", permissive)):
            if value is not None:
                body[key] = value
        if require is not None:
            body["require"] = list(require)
        info = self.request("POST", "/v1/sessions", body)
        return Session(self, info)

    def sessions(self, kind: Optional[str] = None,
                 states: Optional[Iterable[str]] = None,
                 limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The sessions on record, by id: of ``kind`` ("shell", "python")
        and in one of ``states`` when given, every one otherwise; the
        first ``limit`` of them when given. The daemon answers a page at
        a time (at most 1000); every page is asked for in turn."""
        query: Dict[str, Any] = {}
        if kind is not None:
            query["kind"] = kind
        if states is not None:
            query["state"] = ",".join(states)
        listed: List[Dict[str, Any]] = []
        while True:
            if limit is not None:
                query["limit"] = min(1000, limit - len(listed))
            target = "/v1/sessions"
            if query:
                target += "?" + urllib.parse.urlencode(query)
            page = self.request("GET", target)
            listed += page["sessions"]
            if "next" not in page or (limit is not None and len(listed) >= limit):
                return listed
            query["after"] = page["next"]


class Session:
    """A shell session: a persistent shell and its workspace."""

    def __init__(self, client: Client, info: Dict[str, Any]):
        self.client = client
        self.info = info
        self.id = info["id"]
        self._base = "/v1/sessions/" + urllib.parse.quote(self.id, safe="")

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def refresh(self) -> Dict[str, Any]:
        self.info = self.client.request("GET", self._base)
        return self.info

    @property
    def state(self) -> str:
        return self.refresh()["state"]

    def exec(self, command: str, timeout_ms: Optional[int] = None,
             stdin: Optional[str] = None) -> Dict[str, Any]:
        """Runs one command in the shell; returns {exit_code, stdout, stderr,
        ..., timed_out, invalidated, shell_restarted, duration_ms}."""
        body: Dict[str, Any] = {"command": command}
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if stdin is not None:
            body["stdin"] = stdin
        return self.client.request("POST", self._base + "/exec", body)

    def interrupt(self) -> bool:
        """SIGINT to the running command; False when nothing ran."""
        return self.client.request("POST", self._base + "/interrupt", {})["interrupted"]

    def put_file(self, path: str, data: bytes, chunk_size: int = _CHUNK,
                 sha256: Optional[str] = None) -> Dict[str, Any]:
        """Uploads ``data`` in chunks of ``chunk_size``; the last carries the
        digest of the whole file, which the daemon verifies (IntegrityError
        and no file left on a mismatch)."""
        digest = sha256 or hashlib.sha256(data).hexdigest()
        target = self._base + "/files/" + _quote(path)
        view = memoryview(data)
        offset = 0
        while True:
            chunk = bytes(view[offset:offset + chunk_size])
            last = offset + len(chunk) >= len(data)
            headers = {"Content-Type": "application/octet-stream"}
            if last:
                headers["X-Content-SHA256"] = digest
            query = f"?offset={offset}" if offset else ""
            result = self.client.request("PUT", target + query, chunk, headers)
            offset += len(chunk)
            if last:
                return result

    def get_file(self, path: str) -> bytes:
        """Downloads a file and verifies it against the daemon's digest."""
        response, payload = self.client.request(
            "GET", self._base + "/files/" + _quote(path), raw=True)
        expected = response.getheader("X-Content-SHA256")
        actual = hashlib.sha256(payload).hexdigest()
        if expected != actual:
            raise IntegrityError(422, "integrity",
                                 f"{path}: the download does not match its digest "
                                 f"({actual} != {expected})", "X-Content-SHA256")
        return payload

    def delete_file(self, path: str) -> None:
        self.client.request("DELETE", self._base + "/files/" + _quote(path))

    def list_files(self, dir: str = "") -> List[Dict[str, Any]]:
        query = "?dir=" + urllib.parse.quote(dir, safe="") if dir else ""
        return self.client.request("GET", self._base + "/files" + query)["entries"]

    def close(self, keep_workspace: bool = False) -> Dict[str, Any]:
        """Tears the session down (verified); removes the workspace unless kept."""
        query = "?keep_workspace=true" if keep_workspace else ""
        self.info = self.client.request("DELETE", self._base + query)
        return self.info
