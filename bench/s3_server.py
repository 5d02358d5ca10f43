"""The bench's own S3-compatible server: moto on 127.0.0.1, counting every request it answers.

``durably bench --local-s3`` measures ``s3://`` against it, so requests per
step are counted where they cost money, at the server, not estimated at the
client. As the tests' server does (``tests/support/s3_server.py``), a WSGI wrapper
around moto's app logs each request and runs every mutating one (PUT, POST,
DELETE) under one lock: moto checks ``If-None-Match`` and stores the object
in two steps, and the lock makes that atomic as S3's conditional writes are.
Dummy credentials are set in the environment while it runs (child processes
of the bench inherit them) and put back afterwards.

Needs the ``bench-s3`` extra (``pip install 'durably[bench-s3]'``: moto's
server and the S3 adapter's client).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from durably.errors import InvalidArgumentError

BUCKET = "durably-bench"
REGION = "us-east-1"
_MUTATING = frozenset({"PUT", "POST", "DELETE"})
_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_CONFIG_FILE": "/nonexistent/durably-bench-aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/durably-bench-aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


class _Counting:
    """WSGI wrapper: counts each request by method, serialises the mutating ones."""

    def __init__(self, app: Any, server: BenchS3Server) -> None:
        self.app, self.server = app, server

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        with self.server._count_lock:
            self.server._counts[method] += 1
        if method not in _MUTATING:
            return self.app(environ, start_response)
        with self.server._write_lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]  # the whole body inside the lock: moto stores while it renders
            finally:
                getattr(result, "close", lambda: None)()


class BenchS3Server:
    """A started moto server with ``BUCKET`` (``with BenchS3Server() as server:``).

    ``url(store)``: the ``s3://`` URL to measure; ``counts()``: requests answered so far by method.
    Raises ``ImportError`` naming the extra when moto is missing.
    """

    def __init__(self) -> None:
        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise ImportError("durably bench --local-s3 needs moto's server: pip install 'durably[bench-s3]'") from exc
        from werkzeug.serving import make_server

        owner = self

        class _Server(ThreadedMotoServer):
            def _server_entry(self) -> None:
                app = _Counting(DomainDispatcherApplication(create_backend_app), owner)
                self._server = make_server(self._ip_address, self._port, app, True, request_handler=_QuietHandler)
                self._server_ready_event.set()
                self._server.serve_forever()

        class _QuietHandler(MotoRequestHandler):
            def log(self, type: str, message: str, *args: Any) -> None:
                pass

        self._server = _Server("127.0.0.1", 0, verbose=False)
        self._counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> BenchS3Server:
        for name in (*_ENV, *_UNSET):
            self._saved[name] = os.environ.get(name)
        os.environ.update(_ENV)
        for name in _UNSET:
            os.environ.pop(name, None)
        self._server.start()
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint_url, region_name=REGION).create_bucket(Bucket=BUCKET)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop()
        wsgi = getattr(self._server, "_server", None)
        if wsgi is not None:
            wsgi.server_close()
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.get_host_and_port()
        return f"http://{host}:{port}"

    def url(self, store: str | None = None) -> str:
        """The ``s3://`` URL on this server: ``store``'s prefix when it is an ``s3://`` URL
        (its bucket must be ``BUCKET``), else a new prefix of ``BUCKET``."""
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        if store:
            parts = urlsplit(store)
            if parts.scheme != "s3":
                raise InvalidArgumentError(f"--local-s3 measures s3:// URLs, not {store!r}")
            if parts.netloc and parts.netloc != BUCKET:
                raise InvalidArgumentError(f"--local-s3 serves the bucket {BUCKET!r}, not {parts.netloc!r}")
            prefix = parts.path.strip("/") or prefix
        return f"s3://{BUCKET}/{prefix}?endpoint_url={self.endpoint_url}&region={REGION}&path_style=1"

    def counts(self) -> dict[str, int]:
        """Requests answered so far, by HTTP method."""
        with self._count_lock:
            return dict(self._counts)
