"""A local S3 for tests: moto's ThreadedMotoServer on 127.0.0.1, made honest about races, with faults on demand.

Two changes to moto's server, both as a WSGI wrapper around its app:

* **Serialised requests.** moto checks ``If-None-Match``/``If-Match`` and then
  stores the object as two steps, so two threads racing for one key can both
  pass the check (measured: about one double winner in 2,000 races of 8
  writers). S3 documents conditional writes as atomic. Reads race writes in
  moto too: a listing iterates the bucket's key dict while a DELETE changes it
  (KeyError), a GET reads an object's buffer after an overwrite closed it
  (ValueError); each is answered 500 (seen 12 and 2 times in one S3 torture
  run). The wrapper runs every request under one lock, which makes moto's
  check-and-store atomic like S3's and its reads consistent; faults (stalls)
  happen outside the lock.
* **Fault injection.** ``server.inject(Fault(...))`` makes the next matching
  requests fail the way S3 and networks do: 503 SlowDown, 409
  ConditionalRequestConflict, a stall past the client's read timeout (applied
  or not), or a connection dropped after the request was applied. The faults
  are real HTTP behaviour, so the client's whole stack (aiohttp, botocore's
  error parsing, the adapter's retries) is exercised, not a mock of it.

``server.requests`` logs every request (method, path, query) for cost checks.
The ``s3_server`` fixture (``tests/conftest.py``) is one server for the whole
test session, started by ``running_server`` on a free port with dummy
credentials in the environment and ``BUCKET`` created; after each test, the
faults it armed are cleared and a server it killed is revived. Tests share the
bucket, each under a key prefix of its own.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

import boto3
import pytest
from moto.moto_server import threaded_moto_server
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

BUCKET = "durably-test"
REGION = "us-east-1"

_ERRORS = {
    "slowdown": ("503 Slow Down", "SlowDown", "Please reduce your request rate."),
    "conflict": ("409 Conflict", "ConditionalRequestConflict", "A conflicting operation is in progress."),
    "internal": ("500 Internal Server Error", "InternalError", "We encountered an internal error."),
}


@dataclass
class Fault:
    """What to do to the next ``times`` requests with ``method`` whose path contains ``path_part``.

    ``kind``: ``"slowdown"`` (503 SlowDown), ``"conflict"`` (409
    ConditionalRequestConflict), ``"internal"`` (500): not applied;
    ``"stall"``: wait ``delay`` seconds, then 503, not applied;
    ``"stall_after"``: applied, then wait ``delay`` seconds before answering;
    ``"drop_after"``: applied, then the connection is closed without an answer;
    ``"ignore_conditions"``: applied with ``If-None-Match``/``If-Match`` removed
    (an S3-compatible server without conditional writes).
    ``before``, if set, runs in the server thread before the fault acts (e.g.
    to let another writer win the key first). ``hits`` counts the requests it hit.
    """

    method: str
    path_part: str
    kind: str
    times: int = 1
    delay: float = 0.0
    before: Callable[[], None] | None = None
    hits: int = 0


@dataclass(frozen=True)
class Request:
    """One request the server received: ``method``, URL-decoded ``path``, raw ``query``."""

    method: str
    path: str
    query: str


@dataclass
class _Barrier:
    path_part: str
    barrier: threading.Barrier
    passed: list[bool] = field(default_factory=list)
    entered: int = 0  # only the first `barrier.parties` matching requests take part


class _Gate:
    """The WSGI wrapper: logs, injects faults, serialises requests (see the module docstring)."""

    def __init__(self, app, server: S3TestServer) -> None:
        self.app = app
        self.server = server

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"]
        path = unquote(environ.get("PATH_INFO", ""))
        self.server.requests.append(Request(method, path, environ.get("QUERY_STRING", "")))
        if self.server.killed:
            # A request on a connection that outlived the kill: a dead server answers nothing.
            environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
            start_response("500 Dropped", [])
            return []
        self.server._meet_barrier(method, path)
        fault = self.server._take_fault(method, path)
        if fault is None:
            status, headers, body = self._apply(environ)
            start_response(status, headers)
            return [body]
        if fault.before is not None:
            fault.before()
        if fault.kind in _ERRORS:
            return self._error(start_response, *_ERRORS[fault.kind])
        if fault.kind == "stall":
            time.sleep(fault.delay)
            return self._error(start_response, *_ERRORS["slowdown"])
        if fault.kind == "ignore_conditions":
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        status, headers, body = self._apply(environ)
        if fault.kind == "ignore_conditions":
            start_response(status, headers)
            return [body]
        if fault.kind == "stall_after":
            time.sleep(fault.delay)
            start_response(status, headers)
            return [body]
        if fault.kind == "drop_after":
            environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
            start_response("500 Dropped", [])
            return []
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _apply(self, environ) -> tuple[str, list, bytes]:
        """Run moto on the request under the server's lock; return its whole response."""
        captured: dict = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        def run() -> bytes:
            result = self.app(environ, capture)
            try:
                return b"".join(result)
            finally:
                getattr(result, "close", lambda: None)()

        with self.server.lock:
            body = run()
        return captured["status"], captured["headers"], body

    @staticmethod
    def _error(start_response, status: str, code: str, message: str):
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body.encode()]


class _QuietHandler(threaded_moto_server.MotoRequestHandler):
    def log(self, type: str, message: str, *args) -> None:
        pass


class S3TestServer(ThreadedMotoServer):
    """moto's threaded server on 127.0.0.1 (port 0: a free one), with the ``_Gate`` wrapper."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0, verbose=False)
        self.lock = threading.Lock()  # every request runs under it (see the module docstring)
        self.requests: list[Request] = []
        self._faults: list[Fault] = []
        self._faults_lock = threading.Lock()
        self._barrier: _Barrier | None = None
        self.killed = False  # set by kill(): every request is dropped unanswered until revive()

    def _server_entry(self) -> None:
        app = _Gate(threaded_moto_server.DomainDispatcherApplication(threaded_moto_server.create_backend_app), self)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=_QuietHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        super().stop()
        if self._server is not None:
            self._server.server_close()

    def kill(self) -> None:
        """Die as a crashed server does: stop listening, and drop every open connection unanswered.

        The objects stay (moto keeps them in this process), as a real server's disk would.
        """
        self._port = self.get_host_and_port()[1]  # revive() listens on the same port
        self.killed = True
        self.stop()

    def revive(self) -> None:
        """Listen again on the same port after ``kill()``; returns once it accepts connections."""
        self.killed = False
        self.start()

    @property
    def endpoint_url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def url(self, prefix: str, **params: object) -> str:
        """An ``s3://`` URL for ``prefix`` in ``BUCKET`` on this server, plus extra query ``params``."""
        query = "&".join(
            f"{k}={v}"
            for k, v in {"endpoint_url": self.endpoint_url, "region": REGION, "path_style": 1, **params}.items()
        )
        return f"s3://{BUCKET}/{prefix}?{query}"

    def client(self):
        """A synchronous boto3 client of this server, for setting up and inspecting state."""
        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION)

    def inject(self, fault: Fault) -> Fault:
        """Arm ``fault``; it acts on the next matching requests. Returns it (to read ``hits``)."""
        with self._faults_lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()
            self._barrier = None

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.method == method and fault.path_part in path and fault.hits < fault.times:
                    fault.hits += 1
                    return fault
        return None

    def expect_concurrent_puts(self, count: int, path_part: str, timeout: float = 10.0) -> list[bool]:
        """Hold PUTs to paths containing ``path_part`` until ``count`` of them are in flight at once.

        Returns a list that gets one True per request that met the others, or
        False if it waited ``timeout`` seconds in vain (the client sent them one
        at a time). Proves concurrency by behaviour, not by timing.
        """
        self._barrier = _Barrier(path_part, threading.Barrier(count, timeout=timeout))
        return self._barrier.passed

    def _meet_barrier(self, method: str, path: str) -> None:
        waiting = self._barrier
        if waiting is None or method != "PUT" or waiting.path_part not in path:
            return
        with self._faults_lock:
            if waiting.entered >= waiting.barrier.parties:
                return
            waiting.entered += 1
        try:
            waiting.barrier.wait()
        except threading.BrokenBarrierError:
            waiting.passed.append(False)
        else:
            waiting.passed.append(True)


_DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": "/nonexistent/durably-test-aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/durably-test-aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextlib.contextmanager
def running_server() -> Iterator[S3TestServer]:
    """A started ``S3TestServer`` with ``BUCKET`` created and dummy credentials set; stopped (and the
    environment restored) at the end."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in _DUMMY_ENV.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        server = S3TestServer()
        server.start()
        try:
            server.client().create_bucket(Bucket=BUCKET)
            yield server
        finally:
            server.stop()
