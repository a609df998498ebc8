"""Private on-disk artifact store: one 0700 directory per session, one 0600 file per artifact.

Why so strict: artifacts hold whole tool outputs (logs, query dumps, screenshots) that may be
secret, and the state directory may sit on a shared machine. So every directory is checked with
``lstat``/``fstat`` (a real directory, ours, no group/other bits) before use, files are created
relative to a directory file descriptor with ``O_EXCL|O_NOFOLLOW`` (no symlink games, never an
overwrite), and ids are random (>= 128 bits), so knowing one session's id says nothing about
another's. An artifact is written under a temporary name no id matches and linked to its id
only once whole and fsynced: a gateway killed mid-write leaves no id naming half an output
(the owner's CLI would list and read it as whole), and retention removes what it left. The
gateway reaches artifacts only through an :class:`ArtifactStore` bound to its own session; the
CLI (the human owner) may look across sessions with :func:`list_artifacts` and :func:`find_artifact`.

Every ``OSError`` while writing becomes :class:`StoreError` with a one-line, deterministic
reason (no random names in it), so the caller can show a non-retention warning instead of
failing the tool call. Reads raise :class:`ArtifactNotFound` with a message that names only the
id that was asked for.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from .retention import doomed

__all__ = [
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactStore",
    "STALE_PARTIAL",
    "Artifacts",
    "StoreError",
    "artifact_not_found",
    "find_artifact",
    "gc",
    "list_artifacts",
    "valid_id",
]

_ID_RE = re.compile(r"[A-Za-z0-9_-]{22,64}")
_SESSION_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""(``O_NONBLOCK``: a FIFO at an artifact's path is refused as not a regular file, never waited on.)"""
_MAX_ID_ATTEMPTS = 16
_WRITE_CHUNK = 1 << 20
_PARTIAL = ".partial"
"""The suffix of an artifact being written (``.<random>.partial``: a name no id matches)."""
STALE_PARTIAL = 600.0
"""Seconds after which a partial file is a write that never finished (its gateway was killed)."""
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK})


class StoreError(Exception):
    """The store cannot be used or written; the message is one line, for the gateway's log.

    ``shown``: the same reason without the host's paths, what a model (over HTTP, any
    principal) may be shown in a result's trailer (``spill.bound.retain``); the message itself
    when it names none."""

    def __init__(self, message: str, *, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = message if shown is None else shown


class ArtifactNotFound(LookupError):
    """No such artifact for this reader; the message reveals nothing about other sessions."""


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """One artifact on disk, for listings and retention."""

    session: str
    id: str
    size: int
    mtime: float


class Artifacts(Protocol):
    """One owner's artifacts as spilling and ``artifact_read`` use them: blocking calls, made
    from a worker thread. :class:`ArtifactStore` is the file backend; the gateway's shared
    stores provide others (so this package never depends on them)."""

    def put_chunks(self, chunks: Iterable[bytes | memoryview]) -> str: ...

    def open(self, artifact_id: str) -> AbstractContextManager[BinaryIO]: ...

    def size(self, artifact_id: str) -> int: ...

    def read(self, artifact_id: str, offset: int, length: int) -> bytes: ...

    def gc(
        self, *, max_age_seconds: float, max_total_bytes: int, now: float | None = None, handed: Collection[str] = ()
    ) -> list[ArtifactInfo]: ...


def new_id() -> str:
    """A random artifact id: 24 bytes = 192 bits, URL-safe base64, never beginning with ``-``
    (a command line would take ``prefixgate artifacts read -x...`` for an option)."""
    while True:
        made = secrets.token_urlsafe(24)
        if not made.startswith("-"):
            return made


def _new_id() -> str:
    """The file store's id maker (tests monkeypatch this)."""
    return new_id()


def valid_id(s: object) -> bool:
    """True for strings shaped like an artifact id; rejects anything path-like before any I/O."""
    return isinstance(s, str) and _ID_RE.fullmatch(s) is not None


def artifact_not_found(artifact_id: object) -> ArtifactNotFound:
    """The one refusal for an id this reader may not see (unknown, malformed or another's)."""
    shown = artifact_id if isinstance(artifact_id, str) and len(artifact_id) <= 80 else "…"
    return ArtifactNotFound(f"no artifact with id {shown!r} in this session")


def _reason(what: str, exc: OSError) -> str:
    """Deterministic one-line reason: strerror only (an OSError's filename would be a random id)."""
    text = os.strerror(exc.errno) if exc.errno else (str(exc) or type(exc).__name__)
    return f"{what}: {text}"


# --------------------------------------------------------------------------- directories


def _check_dir_fd(fd: int, label: str, *, tighten: bool = True) -> None:
    """Refuse a directory we do not own; tighten one we own to exactly 0700 (unless not
    ``tighten``: a check that writes nothing), then re-check."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{label} is not a directory")
    if st.st_uid != os.geteuid():
        raise StoreError(f"{label} is owned by uid {st.st_uid}, not by us (uid {os.geteuid()})")
    if tighten and stat.S_IMODE(st.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o700:
            raise StoreError(f"{label} cannot be made private (mode 0700)")


def _lstat_dir(path: str | Path, label: str, dir_fd: int | None = None) -> bool:
    """False if missing; raise if it exists but is not a real directory (e.g. a symlink)."""
    try:
        st = os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise StoreError(f"{label} is a symlink; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{label} is not a directory")
    return True


def _make_parents(root: Path) -> None:
    """Create missing ancestors of root with mode 0700 (makedirs would use the umask default)."""
    missing: list[Path] = []
    p = root.parent
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass


def open_private_dir(
    path: str | Path, label: str, *, create: bool, dir_fd: int | None = None, tighten: bool = True
) -> int | None:
    """Verified fd of a private directory (created 0700 if asked), never following a symlink.

    None when it is missing and ``create`` is False. ``tighten=False``: its mode is left as
    it is (``doctor``, which reports modes and changes nothing).
    """
    try:
        if not _lstat_dir(path, label, dir_fd=dir_fd):
            if not create:
                return None
            if dir_fd is None:
                _make_parents(Path(path))
            try:
                os.mkdir(path, 0o700, dir_fd=dir_fd)
            except FileExistsError:
                pass
            _lstat_dir(path, label, dir_fd=dir_fd)
        fd = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        raise StoreError(_reason(f"cannot open {label}", e)) from None
    try:
        _check_dir_fd(fd, label, tighten=tighten)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_root(root: Path, *, create: bool) -> int | None:
    """Verified fd of the artifact root, or None when it is missing and create is False.
    Its refusal names the root's path for the log, never in ``StoreError.shown``."""
    try:
        return open_private_dir(root, "artifact directory", create=create)
    except StoreError as exc:
        raise StoreError(f"{exc} ({str(root)!r})", shown=exc.shown) from None


def _open_session(root_fd: int, session: str, *, create: bool) -> int | None:
    """Verified fd of a session directory (relative to root_fd, never following a symlink).
    Its refusal names the directory for the log, never in ``StoreError.shown``: a process's
    own session key is random, and what a model is shown is deterministic."""
    try:
        return open_private_dir(session, "session directory", create=create, dir_fd=root_fd)
    except StoreError as exc:
        raise StoreError(f"{exc} ({session!r})", shown=exc.shown) from None


@contextmanager
def _dirs(root: Path, session: str, *, create: bool) -> Iterator[int | None]:
    """Yield the verified session dir fd (None if absent and not creating); closes both fds."""
    root_fd = _open_root(root, create=create)
    if root_fd is None:
        yield None
        return
    try:
        session_fd = _open_session(root_fd, session, create=create)
        if session_fd is None:
            yield None
            return
        try:
            yield session_fd
        finally:
            os.close(session_fd)
    finally:
        os.close(root_fd)


# --------------------------------------------------------------------------- writing


def _write_all(fd: int, chunks: Iterable[bytes | memoryview]) -> int:
    """Write every byte, looping on short writes; returns the total written."""
    total = 0
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        while view:
            n = os.write(fd, view[:_WRITE_CHUNK])
            if n <= 0:
                raise OSError(errno.EIO, "short write made no progress")
            view = view[n:]
            total += n
    return total


def _failed(what: str, where: str, exc: OSError) -> StoreError:
    """``what`` failed in the directory ``where``: the log's message names it, what a model is
    shown (``shown``) does not."""
    return StoreError(_reason(f"{what} in {where!r}", exc), shown=_reason(what, exc))


def _create_file(dir_fd: int, where: str) -> tuple[str, int]:
    """Create a fresh 0600 partial file (``.<random>.partial``); an existing name is skipped, never reused."""
    for _ in range(_MAX_ID_ATTEMPTS):
        name = f".{secrets.token_hex(12)}{_PARTIAL}"
        try:
            return name, os.open(name, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError as e:
            raise _failed("cannot create artifact", where, e) from None
    raise StoreError("cannot create artifact: no free name after repeated collisions")


def _publish(dir_fd: int, partial: str) -> str:
    """Give the whole, fsynced partial file a new random id (a hard link: an existing name is
    skipped, never replaced) and remove its partial name; the id."""
    for _ in range(_MAX_ID_ATTEMPTS):
        name = _new_id()
        if not valid_id(name):
            raise StoreError("artifact id generator produced a malformed id")
        try:
            os.link(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
            # A file system without hard links (some FUSE and SMB mounts): renamed, once the name is free.
            try:
                os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                continue
            except FileNotFoundError:
                os.rename(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                return name
        os.unlink(partial, dir_fd=dir_fd)
        return name
    raise StoreError("cannot create artifact: no free id after repeated collisions")


def _unlink_quietly(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _store_chunks(dir_fd: int, chunks: Iterable[bytes | memoryview], where: str) -> str:
    """Create, fill and fsync one artifact in the directory ``dir_fd`` (``where``), then publish
    it under its id; on any failure the partial file is removed."""
    partial, fd = _create_file(dir_fd, where)
    try:
        try:
            os.fchmod(fd, 0o600)  # exact mode whatever the umask
            _write_all(fd, chunks)
            os.fsync(fd)
        finally:
            os.close(fd)
        name = _publish(dir_fd, partial)
        os.fsync(dir_fd)
    except OSError as e:
        _unlink_quietly(partial, dir_fd)
        raise _failed("cannot write artifact", where, e) from None
    except BaseException:
        _unlink_quietly(partial, dir_fd)
        raise
    return name


# --------------------------------------------------------------------------- the store


class ArtifactStore:
    """Artifacts of one session under ``root/<session_key>/``; directories are created lazily.

    Construction does no I/O, so a broken state directory never stops the gateway; each
    operation re-verifies the directories (a handful of syscalls) so a directory swapped for a
    symlink after start-up is still refused.
    """

    def __init__(self, root: Path, session_key: str, *, max_age: Callable[[], float] | None = None) -> None:
        """``max_age``: seconds past which an artifact is expired (read at each open, so a
        reload's age applies): it is then refused like an unknown id, though retention (at
        start, after a spill) has not removed its file yet. None: never (the owner's CLI)."""
        if _SESSION_RE.fullmatch(session_key) is None:
            raise ValueError("session_key must match [A-Za-z0-9_-]{1,128}")
        self.root = Path(root)
        self.session_key = session_key
        self.max_age = max_age

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r}, {self.session_key!r})"

    def ensure(self) -> None:
        """Create and verify the directories now (at start-up), raising StoreError if unusable."""
        with _dirs(self.root, self.session_key, create=True):
            pass

    def put(self, data: bytes | memoryview) -> str:
        """Store one artifact and return its id; durable (fsynced) when this returns."""
        return self.put_chunks((data,))

    def put_chunks(self, chunks: Iterable[bytes | memoryview]) -> str:
        """Like put, for output held as pieces: avoids joining (and copying) a large result."""
        pieces = list(chunks)
        for attempt in range(2):
            with _dirs(self.root, self.session_key, create=True) as dir_fd:
                assert dir_fd is not None
                try:
                    return _store_chunks(dir_fd, pieces, str(self.root / self.session_key))
                except StoreError:
                    # A concurrent gc may remove our empty session dir between open and create;
                    # the dir fd then points at a deleted directory. Retry once with a fresh one.
                    if attempt == 0 and os.fstat(dir_fd).st_nlink == 0:
                        continue
                    raise
        raise StoreError("cannot write artifact: session directory vanished")

    @contextmanager
    def open(self, artifact_id: str) -> Iterator[BinaryIO]:
        """Open an artifact of this session for streaming reads (never following a symlink)."""
        if not valid_id(artifact_id):
            raise artifact_not_found(artifact_id)
        try:
            with _dirs(self.root, self.session_key, create=False) as dir_fd:
                if dir_fd is None:
                    raise artifact_not_found(artifact_id)
                fd = os.open(artifact_id, _READ_FLAGS, dir_fd=dir_fd)
        except (OSError, StoreError):
            raise artifact_not_found(artifact_id) from None
        f = os.fdopen(fd, "rb")
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise artifact_not_found(artifact_id)  # (another owner's file is not ours to show: ``_scan_session``)
            if self.max_age is not None and time.time() - st.st_mtime > self.max_age():
                raise artifact_not_found(artifact_id)  # expired, as retention judges it (``gc``)
            yield f
        finally:
            f.close()

    def size(self, artifact_id: str) -> int:
        """Size in bytes of an artifact of this session."""
        with self.open(artifact_id) as f:
            return os.fstat(f.fileno()).st_size

    def read(self, artifact_id: str, offset: int, length: int) -> bytes:
        """Up to length bytes from offset (fewer at the end); reads only what is asked for."""
        if offset < 0 or length < 0:
            raise ValueError("offset and length must be >= 0")
        with self.open(artifact_id) as f:
            return os.pread(f.fileno(), length, offset) if length else b""

    def gc(
        self, *, max_age_seconds: float, max_total_bytes: int, now: float | None = None, handed: Collection[str] = ()
    ) -> list[ArtifactInfo]:
        """Retention across all sessions under root, protecting this session's fresh artifacts:
        its newest and the ids ``handed`` out by the answer that runs it."""
        return gc(
            self.root,
            max_age_seconds=max_age_seconds,
            max_total_bytes=max_total_bytes,
            now=now,
            protect_session=self.session_key,
            handed=handed,
        )


# --------------------------------------------------------------------------- across sessions


def _scan_session(root_fd: int, session: str, stale_before: float | None = None) -> list[ArtifactInfo]:
    """Artifacts of one session dir; skips anything that is not our regular, id-named file.
    With ``stale_before``, removes the partial files last written before it on the way: writes
    a killed gateway never finished (no write still in progress is that old)."""
    try:
        fd = _open_session(root_fd, session, create=False)
    except StoreError:
        return []
    if fd is None:
        return []
    try:
        found = []
        for name in os.listdir(fd):
            partial = name.startswith(".") and name.endswith(_PARTIAL)
            if not (valid_id(name) or (partial and stale_before is not None)):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()):
                continue
            if not partial:
                found.append(ArtifactInfo(session, name, st.st_size, st.st_mtime))
            elif stale_before is not None and st.st_mtime < stale_before:
                _unlink_quietly(name, fd)
        return found
    finally:
        os.close(fd)


def _session_names(root_fd: int) -> list[str]:
    names = []
    for name in os.listdir(root_fd):
        if _SESSION_RE.fullmatch(name) is None:
            continue
        try:
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            names.append(name)
    return sorted(names)


def _scan(root_fd: int, stale_before: float | None = None) -> list[ArtifactInfo]:
    """Every artifact under root, oldest first (ties broken by session and id: deterministic)."""
    found = [a for s in _session_names(root_fd) for a in _scan_session(root_fd, s, stale_before)]
    return sorted(found, key=lambda a: (a.mtime, a.session, a.id))


def list_artifacts(root: Path) -> list[ArtifactInfo]:
    """All artifacts of all sessions, oldest first; empty when the store was never created."""
    root_fd = _open_root(Path(root), create=False)
    if root_fd is None:
        return []
    try:
        return _scan(root_fd)
    finally:
        os.close(root_fd)


def find_artifact(root: Path, artifact_id: str) -> ArtifactStore:
    """The store (session) holding artifact_id, for the owner's CLI; ArtifactNotFound otherwise."""
    if not valid_id(artifact_id):
        raise ArtifactNotFound(f"no artifact with id {artifact_id!r}")
    for info in list_artifacts(root):
        if info.id == artifact_id:
            return ArtifactStore(Path(root), info.session)
    raise ArtifactNotFound(f"no artifact with id {artifact_id!r}")


def _unlink_artifact(root_fd: int, info: ArtifactInfo) -> bool:
    try:
        fd = _open_session(root_fd, info.session, create=False)
    except StoreError:
        return False
    if fd is None:
        return False
    try:
        os.unlink(info.id, dir_fd=fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def gc(
    root: Path,
    *,
    max_age_seconds: float,
    max_total_bytes: int,
    now: float | None = None,
    protect_session: str | None = None,
    protect_seconds: float = 60.0,
    handed: Collection[str] = (),
) -> list[ArtifactInfo]:
    """Delete expired artifacts, then until under max_total_bytes the oldest of the owner that
    holds the most (``spill.retention``); return the removed.

    An artifact younger than protect_seconds is never deleted for another session's excess,
    and protect_session's newest and ``handed`` never (``spill.retention.doomed``), so the ids a
    model was just handed stay readable; without protect_session, nothing is spared. Empty
    session directories of other sessions are removed, and partial files older than
    ``STALE_PARTIAL`` seconds (a killed gateway's). Symlinks and foreign files are never
    followed or touched.
    """
    now = time.time() if now is None else now
    root_fd = _open_root(Path(root), create=False)
    if root_fd is None:
        return []
    try:
        artifacts = _scan(root_fd, stale_before=now - STALE_PARTIAL)
        chosen = doomed(
            artifacts,
            max_age_seconds=max_age_seconds,
            max_total_bytes=max_total_bytes,
            now=now,
            spiller=protect_session,
            fresh_seconds=protect_seconds if protect_session is not None else 0.0,
            handed=handed,
        )
        removed = [a for a in chosen if _unlink_artifact(root_fd, a)]
        for session in _session_names(root_fd):
            if session != protect_session:
                try:
                    os.rmdir(session, dir_fd=root_fd)  # fails harmlessly unless empty
                except OSError:
                    pass
        return removed
    finally:
        os.close(root_fd)
