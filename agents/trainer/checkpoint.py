"""Checkpoints that are either whole or ignored.

A yield has a deadline, after which the pod is killed: a SIGKILL can land in
the middle of a save, and a resume must never pick up half a file. Measured on
this kind of machine, a reader loading while a writer ``torch.save``s straight
to the final path failed on half its loads; the recipe below had none:

1. write to a temporary file in the same directory (same filesystem, so the
   rename is atomic), flush and ``fsync`` it;
2. ``os.replace`` it onto its final name and ``fsync`` the directory;
3. only then write the manifest, ``ckpt-<step>.json``, the same way.

The manifest is the commit record: a ``.pt`` without one is an interrupted save.
It also carries the file's size and SHA-256 (computed while the bytes are
written, not by reading them back), because ``torch.load`` happily loads a file
with flipped bytes inside a tensor, and it lets the node agent read the step,
time and reason of the newest checkpoint without importing torch.

On resume the newest checkpoint that verifies wins; the ones that do not are
renamed ``*.invalid`` (kept for a post-mortem, never loaded, removed by the
retention once older checkpoints are) with a warning, so they can neither crash
a resume nor confuse the retention.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

logger = logging.getLogger(__name__)

FORMAT = "gpuyield-checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d{12})\.(pt|json)(\.invalid)?$")
_TEMP_PREFIX = ".ckpt-"
_TEMP_SUFFIX = ".tmp"


class CheckpointError(Exception):
    """A checkpoint cannot be trusted; ``str()`` says why in one line."""


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A committed checkpoint, as its manifest describes it."""

    step: int
    path: Path
    size: int
    sha256: str
    metadata: Mapping[str, Any]

    @property
    def saved_at(self) -> float | None:
        value = self.metadata.get("saved_at")
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    info: CheckpointInfo
    state: dict[str, Any]


class _HashingWriter:
    """A file wrapper that hashes what torch writes, so saving costs one pass, not two."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.size += view.nbytes
        return self._file.write(view)

    def flush(self) -> None:
        self._file.flush()


def fsync_directory(directory: Path) -> None:
    """Make a rename durable: without it a power loss can undo the ``os.replace``."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(directory: Path, name: str, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``directory/name`` so that readers see the old file or the new one, never a mix."""
    fd, temp = tempfile.mkstemp(dir=directory, prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide checkpoints from a node agent
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, directory / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_directory(directory)


def _file_name(step: int, kind: str) -> str:
    return f"ckpt-{step:012d}.{kind}"


class CheckpointStore:
    """The checkpoints of one job in one directory, with one writer.

    Only one process may save into a directory (rank 0 in a DDP job); any
    number may load.
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1: a yield needs its checkpoint")
        self.directory = Path(directory)
        self.keep = keep

    def prepare(self) -> None:
        """Create the directory and remove temporaries that a killed writer left behind."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for temp in self.directory.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
            logger.info("removing %s, left by an interrupted save", temp.name)
            with contextlib.suppress(OSError):
                temp.unlink()

    def save(
        self, step: int, state: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> CheckpointInfo:
        """Save atomically, then apply the retention; ``state`` and ``metadata``: plain types."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.directory.mkdir(parents=True, exist_ok=True)
        meta = {**metadata, "step": step}
        document = {**state, "format": FORMAT, "step": step, "metadata": meta}
        hashed: list[_HashingWriter] = []

        def write_state(file: IO[bytes]) -> None:
            writer = _HashingWriter(file)
            torch.save(document, writer)  # type: ignore[arg-type]  # any object with write()
            hashed.append(writer)

        atomic_write(self.directory, _file_name(step, "pt"), write_state)
        writer = hashed[0]
        file = _file_name(step, "pt")
        sha256 = writer.digest.hexdigest()
        manifest = {
            "format": FORMAT,
            "step": step,
            "file": file,
            "size": writer.size,
            "sha256": sha256,
            "metadata": meta,
        }
        encoded = (json.dumps(manifest, sort_keys=True) + "\n").encode()

        def write_manifest(out: IO[bytes]) -> None:
            out.write(encoded)

        atomic_write(self.directory, _file_name(step, "json"), write_manifest)
        info = CheckpointInfo(step, self.directory / file, writer.size, sha256, meta)
        self._retain()
        return info

    def checkpoints(self) -> list[CheckpointInfo]:
        """Committed checkpoints (a readable manifest), newest first; contents not verified."""
        found: list[CheckpointInfo] = []
        for step in sorted(self._steps(), reverse=True):
            try:
                found.append(self._read_manifest(step))
            except CheckpointError:
                continue
        return found

    def load(self, step: int, *, map_location: str | torch.device = "cpu") -> LoadedCheckpoint:
        """Load one checkpoint, verifying its size, digest and format; raise ``CheckpointError``."""
        info = self._read_manifest(step)
        try:
            actual_size = info.path.stat().st_size
        except OSError as exc:
            raise CheckpointError(f"{info.path.name}: {exc.strerror}") from None
        if actual_size != info.size:
            raise CheckpointError(
                f"{info.path.name}: {actual_size} bytes, the manifest says {info.size} "
                "(truncated or overwritten)"
            )
        digest = hashlib.sha256()
        with info.path.open("rb") as file:
            while chunk := file.read(1 << 24):
                digest.update(chunk)
        if digest.hexdigest() != info.sha256:
            raise CheckpointError(f"{info.path.name}: SHA-256 does not match its manifest")
        try:
            state = torch.load(info.path, map_location=map_location, weights_only=True)
        except Exception as exc:  # torch raises many types for a bad archive
            raise CheckpointError(f"{info.path.name}: unreadable ({exc})") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise CheckpointError(f"{info.path.name}: not a {FORMAT} checkpoint")
        if state.get("step") != step:
            raise CheckpointError(f"{info.path.name}: holds step {state.get('step')!r}")
        return LoadedCheckpoint(info, state)

    def load_latest(
        self, *, map_location: str | torch.device = "cpu", quarantine: bool = False
    ) -> LoadedCheckpoint | None:
        """The newest checkpoint that verifies, or None; every bad one is skipped with a warning.

        With ``quarantine`` (the writer only), a bad checkpoint newer than the one
        chosen is renamed ``*.invalid``: it belongs to a timeline the resumed run
        abandons, and would otherwise outrank the new saves in the retention.
        """
        for step in sorted(self._steps(), reverse=True):
            try:
                return self.load(step, map_location=map_location)
            except CheckpointError as exc:
                logger.warning("skipping checkpoint at step %d: %s", step, exc)
                if quarantine:
                    self._quarantine(step)
        return None

    def _steps(self) -> set[int]:
        if not self.directory.is_dir():
            return set()
        steps: set[int] = set()
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match and not match.group(3):
                steps.add(int(match.group(1)))
        return steps

    def _read_manifest(self, step: int) -> CheckpointInfo:
        path = self.directory / _file_name(step, "json")
        try:
            manifest = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise CheckpointError(
                f"{_file_name(step, 'pt')}: no manifest (the save was interrupted)"
            ) from None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path.name}: unreadable manifest ({exc})") from None
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != FORMAT
            or manifest.get("step") != step
            or not isinstance(manifest.get("size"), int)
            or not isinstance(manifest.get("sha256"), str)
            or not isinstance(manifest.get("metadata"), dict)
        ):
            raise CheckpointError(f"{path.name}: not a {FORMAT} manifest for step {step}")
        return CheckpointInfo(
            step,
            self.directory / _file_name(step, "pt"),
            manifest["size"],
            manifest["sha256"],
            manifest["metadata"],
        )

    def _quarantine(self, step: int) -> None:
        for kind in ("pt", "json"):
            path = self.directory / _file_name(step, kind)
            with contextlib.suppress(FileNotFoundError):
                path.replace(path.with_name(path.name + ".invalid"))

    def _retain(self) -> None:
        """Keep the ``keep`` newest committed checkpoints; remove everything older."""
        committed = sorted(
            (
                step
                for step in self._steps()
                if (self.directory / _file_name(step, "json")).exists()
            ),
            reverse=True,
        )
        if len(committed) <= self.keep:
            return
        oldest_kept = committed[self.keep - 1]
        # Manifests first: a crash halfway leaves uncommitted .pt files (ignored, removed
        # next time), never a manifest pointing at nothing.
        for kind in ("json", "pt", "json.invalid", "pt.invalid"):
            for entry in self.directory.glob(f"ckpt-*.{kind}"):
                match = _NAME.match(entry.name)
                if match and int(match.group(1)) < oldest_kept:
                    with contextlib.suppress(FileNotFoundError):
                        entry.unlink()
