"""What the engine asks the operating system: who this process is, and whether another
process on this host still runs.

A lease owner is ``"host:pid:random"``; the host part includes the boot and pid namespace,
so two containers that share a hostname never take each other's pids for their own. A
crash on the same host is thus noticed without waiting for a lease to run out.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Owner:
    """This process as a lease owner: ``"host:pid:random"``."""

    host: str
    pid: int
    text: str


_owner: Owner | None = None
_owner_lock = threading.Lock()


def process_owner() -> Owner:
    """This process's lease-owner identity: one per process (a new one after ``fork``).

    Asks the operating system nothing, so it may run on an event loop: the host part was
    read when this module was imported (`HOST`)."""
    global _owner
    owner, pid = _owner, os.getpid()
    if owner is not None and owner.pid == pid:
        return owner
    with _owner_lock:
        if _owner is None or _owner.pid != pid:
            _owner = Owner(HOST, pid, f"{HOST}:{pid}:{secrets.token_hex(16)}")
        return _owner


def consumer_name() -> str:
    """This process's name in the write-behind journal's consumer group."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _host_identity() -> str:
    """Hostname, plus the boot and pid namespace, so two containers that share a hostname
    never take each other's pids for their own."""
    name = socket.gethostname().replace(":", "_") or "localhost"
    extra = ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            extra += f.read().strip()
        extra += os.readlink("/proc/self/ns/pid")
    except OSError:
        return name
    return f"{name}~{hashlib.sha256(extra.encode()).hexdigest()[:8]}"


HOST = _host_identity()
"""This host in lease owners, read once at import: reading ``/proc`` is a blocking call,
which an event loop must not make (LangGraph's dev server refuses it), and neither the
boot nor the pid namespace changes while the process runs (nor after ``fork``)."""


class ActiveCalls:
    """The keys this process is handling right now, from before the claim until after the
    outcome, counted per caller (to tell a live owner in this process from a dead one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: dict[str, int] = {}

    def enter(self, key: str) -> None:
        with self._lock:
            self._keys[key] = self._keys.get(key, 0) + 1

    def leave(self, key: str) -> None:
        with self._lock:
            left = self._keys.get(key, 1) - 1
            if left:
                self._keys[key] = left
            else:
                self._keys.pop(key, None)

    def count(self, key: str) -> int:
        with self._lock:
            return self._keys.get(key, 0)


ACTIVE = ActiveCalls()


def forked() -> None:
    """In a child after ``fork()``: new locks, and no calls in hand (the ones the parent
    was handling are not this process's; its owner identity renews itself by pid)."""
    global _owner_lock, ACTIVE
    _owner_lock = threading.Lock()
    ACTIVE = ActiveCalls()


def owner_gone(owner: str | None, key: str, asker: str) -> bool:
    """Whether the lease owner provably no longer runs the call ``key``: it is this process
    and no caller handles the key but the asking one (registered in `ACTIVE` under
    ``asker``, which may be another key: a call that goes on as a recorded one), or a
    process on this host that no longer exists."""
    me = process_owner()
    if owner is None:
        return True
    host, _, rest = owner.partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != me.host or not pid_text.isdigit():
        return False
    if owner == me.text:
        return ACTIVE.count(key) - (asker == key) <= 0
    pid = int(pid_text)
    if pid == me.pid:  # an earlier process that had our pid
        return True
    return not _pid_alive(pid)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"  # a zombie is dead
    except (OSError, IndexError):
        return True
