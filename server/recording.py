"""Recording served steps: every step a server answers, appended to a simworld transitions
dump (streamed episodes, see simworld.data.formats.simworld) that `simworld train sft
--data FILE` reads back.

    recorder = Recorder("served.jsonl")                # appends; writes the header if new
    record_id = recorder.begin(session.episode())      # right after each reset
    recorder.step(record_id, index, session.episode().steps[index])   # after each step
    recorder.end(record_id)                            # optional: a session deleted mid-episode
    recorder.close()

Secrets: a session's id is a capability (whoever knows it drives the session), so it is
never written. `begin` records the episode under an id of its own ("rec-" and 32 random hex
digits, unrelated to the session id) and every occurrence of a server-drawn session id
(16 characters or more) inside a line (a client that used it as a call id, say) is replaced
by that record id before it is written. A shorter id is one a client chose (OpenEnv HTTP's
`episode_id`), not a secret, and is left alone: replacing "ep1" inside texts would corrupt
the data.

Crash safety: the dump is opened O_APPEND and each line, newline included, is written by
one `os.write` under a lock, so lines from many request threads never interleave and a
crash leaves at most the line in flight torn; readers report a torn last line and read all
before it. Once `os.write` returns, the line is in the kernel's page cache and survives the
server process dying (an exception, a kill -9). `fsync=True` also survives the machine
losing power, at a price measured on this project's machine (ext4, 1.5 KB lines): an
append alone takes 2-4 us, with fsync 1.0-2.2 ms, paid under the lock, so recording would
cap a server near 500-1000 steps/s across all sessions. The default is therefore
fsync=False: the issue asks for surviving a crash of the server, which the single write
already gives, and a step of the model costs milliseconds itself.

Reopening after a crash: a last line without its newline is finished when it is whole
JSON, and cut (logged as a warning) when it is torn, so the next line starts clean and
`train sft`, which stops at any bad record, reads the dump. An exclusive `flock` keeps two
recorders (two processes, or two in one process) from appending to one file: their header
and repair could break each other's episodes; give each server its own file. A dump that is
not a simworld transitions dump (or is compressed) is refused with file:line and the reason.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from simworld.data.formats.simworld import HEADER, episode_line, sniff, step_line
from simworld.data.jsonio import DumpError, dumps
from simworld.data.records import JSON, Episode, Step

log = logging.getLogger(__name__)

_COMPRESSED = (b"\x1f\x8b", b"\xfd7zXZ\x00")  # gzip, xz
_HEADER_LIMIT = 1 << 16  # bytes of a first line worth reading to tell a header
_TAIL_BLOCK = 1 << 16
SECRET_MIN = 16  # ids this long are server-drawn secrets (the hub draws 32 characters)


class RecorderError(ValueError):
    """A call the recorder cannot take: an unknown or ended record, a step out of order, a
    closed recorder."""


@dataclass
class _Live:
    """A recorded episode still taking steps: the session id it hides, the next index."""

    secret: str
    next_index: int


class Recorder:
    """Appends served episodes to the dump at `path` (see the module docstring)."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.repaired = ""  # what reopening did to a torn last line, if anything
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._by_session: dict[str, str] = {}  # session id -> its live record id
        self._gap = False  # a failed write may have left a line unfinished
        if self.path.name.endswith((".gz", ".xz")):
            raise DumpError(
                f"{self.path}:1",
                "a compressed dump cannot be appended to line by line: record to a .jsonl "
                "file and compress it afterwards",
            )
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o644)
        try:
            _lock_exclusively(fd, self.path)
            if os.fstat(fd).st_size == 0:
                _write_all(fd, (dumps(HEADER) + "\n").encode())
            else:
                _check_header(self.path)
                self.repaired = _repair_tail(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def begin(self, episode: Episode) -> str:
        """Record a new episode (a session right after its reset) as a streamed episode
        line, and any steps it already has; returns the id it is recorded under."""
        record_id = "rec-" + uuid.uuid4().hex
        secret = episode.episode_id
        lines = [episode_line(episode, streamed=True)]
        lines[0]["episode_id"] = record_id
        lines += [step_line(record_id, i, step) for i, step in enumerate(episode.steps)]
        data = b"".join(_encode(line, secret, record_id) for line in lines)
        with self._lock:
            fd = self._open_fd()
            self._append(fd, data)
            previous = self._by_session.pop(secret, None)
            if previous is not None:  # the session was reset: its old episode takes no more
                self._live.pop(previous, None)
            self._live[record_id] = _Live(secret, len(episode.steps))
            self._by_session[secret] = record_id
        return record_id

    def step(self, record_id: str, index: int, step: Step) -> None:
        """Append step `index` of the episode recorded as `record_id`; indices go in order.
        A terminated or truncated step ends the record."""
        with self._lock:
            fd = self._open_fd()
            live = self._live.get(record_id)
            if live is None:
                raise RecorderError(
                    f"{self.path}: step for record {record_id!r}, which this recorder has not "
                    "begun or which has ended (a terminal step, a new begin for its session, "
                    "end(), or a failed write)"
                )
            if index != live.next_index:
                raise RecorderError(
                    f"{self.path}: record {record_id!r}: step index {index} is out of order: "
                    f"expected {live.next_index}"
                )
            try:
                self._append(fd, _encode(step_line(record_id, index, step), live.secret, record_id))
            except OSError:
                self._forget(record_id)  # later steps would leave a gap in its indices
                raise
            live.next_index += 1
            if step.terminated or step.truncated:
                self._forget(record_id)

    def end(self, record_id: str) -> None:
        """Take no more steps for `record_id` (its session was deleted or expired); what was
        written stays. Unknown or ended ids are ignored."""
        with self._lock:
            self._forget(record_id)

    def close(self) -> None:
        """Release the file; later calls are a RecorderError. Closing twice is fine."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)  # also releases the flock
                self._fd = None
            self._live.clear()
            self._by_session.clear()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _open_fd(self) -> int:
        if self._fd is None:
            raise RecorderError(f"{self.path}: the recorder is closed")
        return self._fd

    def _forget(self, record_id: str) -> None:
        live = self._live.pop(record_id, None)
        if live is not None and self._by_session.get(live.secret) == record_id:
            del self._by_session[live.secret]

    def _append(self, fd: int, data: bytes) -> None:
        """Write whole lines (one os.write); after a failed write, first end the line it may
        have left unfinished (an empty line at worst, which readers skip)."""
        if self._gap:
            data = b"\n" + data
        try:
            _write_all(fd, data)
        except OSError:
            self._gap = True
            raise
        self._gap = False
        if self.fsync:
            os.fsync(fd)


def _encode(line: dict[str, JSON], secret: str, record_id: str) -> bytes:
    """The line as UTF-8 with its newline, every occurrence of `secret` replaced."""
    text = dumps(line)
    if len(secret) >= SECRET_MIN and dumps(secret)[1:-1] in text:  # as it shows in JSON strings
        text = dumps(_scrub(line, secret, record_id))
    return (text + "\n").encode("utf-8")


def _scrub(value: JSON, secret: str, replacement: str) -> JSON:
    """`value` with `secret` replaced inside every string, keys included."""
    if isinstance(value, str):
        return value.replace(secret, replacement)
    if isinstance(value, list):
        return [_scrub(item, secret, replacement) for item in value]
    if isinstance(value, dict):
        return {
            _scrub(k, secret, replacement): _scrub(v, secret, replacement) for k, v in value.items()
        }
    return value


def _write_all(fd: int, data: bytes) -> None:
    """One os.write; a short one (a full disk, a signal) is finished by more."""
    written = os.write(fd, data)
    while written < len(data):
        written += os.write(fd, data[written:])


def _lock_exclusively(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RecorderError(
            f"{path}: another recorder is appending to this dump (it holds the file's lock); "
            "give each server its own dump"
        ) from None


def _check_header(path: Path) -> None:
    """DumpError unless the first non-blank line of `path` is a simworld header this
    simworld writes."""
    with open(path, "rb") as stream:
        if stream.read(6).startswith(_COMPRESSED):
            raise DumpError(f"{path}:1", "the file is compressed: record to a plain .jsonl file")
        stream.seek(0)
        number, raw = 1, stream.readline(_HEADER_LIMIT)
        while raw and not raw.strip():
            number, raw = number + 1, stream.readline(_HEADER_LIMIT)
    text = raw.removeprefix(b"\xef\xbb\xbf").strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not sniff(value):
        shown = text[:80].decode("utf-8", "replace") + ("..." if len(text) > 80 else "")
        raise DumpError(
            f"{path}:{number}",
            f"not a simworld transitions dump (its first line is {shown!r}, not the header "
            f"{dumps(HEADER)}): recording appends only to one; record to a new file",
        )
    if value.get("schema_version") != HEADER["schema_version"]:
        raise DumpError(
            f"{path}:{number}",
            f"schema_version {value.get('schema_version')!r} is not the one this simworld "
            f"writes ({HEADER['schema_version']}): record to a new file",
        )


def _repair_tail(fd: int, path: Path) -> str:
    """Finish or cut a last line that lacks its newline (a crash mid-write); what was done."""
    size = os.fstat(fd).st_size
    with open(path, "rb") as stream:
        stream.seek(size - 1)
        if stream.read(1) == b"\n":
            return ""
        start = _line_start(stream, size)
        stream.seek(start)
        tail = stream.read(size - start)
    try:
        json.loads(tail)
    except ValueError:
        os.ftruncate(fd, start)
        done = (
            f"{path}: cut a torn last line ({size - start} bytes from byte {start}), left by a "
            "crash mid-write; every line before it is intact"
        )
        log.warning(done)
        return done
    _write_all(fd, b"\n")
    return f"{path}: ended the last line, whole but missing its newline (byte {size})"


def _line_start(stream: BinaryIO, size: int) -> int:
    """The offset just after the last newline before `size` (0 when there is none)."""
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_BLOCK)
        stream.seek(begin)
        found = stream.read(end - begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        end = begin
    return 0


__all__ = ["Recorder", "RecorderError"]
