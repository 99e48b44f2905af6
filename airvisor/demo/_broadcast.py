"""NCCL weight broadcast between the trainer and inference stand-ins, over a local socket.

prime-rl's NCCL broadcast (both versions) is a group of the trainer's master (rank 0, the
sender) and every inference worker (ranks 1..N): the orchestrator forms it at its own start by
posting `/init_broadcaster` to each server, whose worker builds a new receiver on every call
(main `inference/vllm/worker/nccl.py:95-130`; v0.4 `inference/vllm/worker/nccl.py:89-109`); the
trainer's sender is rank 0 of a `StatelessProcessGroup` on `weight_broadcast.host:port`, whose
store rank 0 hosts. Per policy version, the trainer announces the step (`broadcasts/step_N/
STABLE`), waits for the orchestrator's `NCCL_READY` marker in that directory (written before it
posts `/update_weights`: main `utils/client.py:301-305`, v0.4 `utils/client.py:227-231`), then
broadcasts the state dict; the worker receives it inside `/update_weights`.

The stand-ins keep that shape: rank 0 listens at host:port, a receiver connects (retrying until
the group's timeout, as the store does), and one broadcast is a JSON header (the policy step and
the payload's size) followed by the payload. On one box (host localhost, prime-rl's default)
host:port names a Unix socket in the abstract namespace, under the run's `AIRVISOR_RUN_ID`,
not a TCP port: prime-rl's default port (29501) is the same for every run, and the stand-ins of
two runs on one box (tests side by side) must neither collide nor join each other's group.
Across nodes (multi-node Slurm: the trainer's node) it is TCP, which crosses them. A receive
does what NCCL's does when the sender dies mid-way: it does not notice, and waits for ever (the
worker stuck in a collective, which only a responsiveness probe can see).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import socket
import threading
import time
from dataclasses import dataclass

from airvisor.proc._marker import MARKER_RUN_ENV

NCCL_READY_MARKER = "NCCL_READY"  # main/v0.4 utils/client.py NCCL_READY_MARKER
PAYLOAD_BYTES = 1 << 16  # the stand-in's "state dict" per broadcast


LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "")


def _local(host: str) -> bool:
    """The group meets on this machine (a single-box run): prime-rl's default host."""
    return host in LOOPBACK or host.startswith("127.")


def _address(host: str, port: int) -> str:
    """The group's rendezvous on this machine: host:port within this run (see above)."""
    return f"\0airvisor-demo-nccl/{os.environ.get(MARKER_RUN_ENV, '')}/{host}:{port}"


def _across_nodes() -> bool:
    """The run spans several nodes (a multi-node Slurm job: the receivers connect to the
    trainer's node, `--weight_broadcast.host $MASTER_ADDR` in prime-rl main's
    multi_node_rl.sbatch.j2:453)."""
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "1"
    return nodes.isdigit() and int(nodes) > 1


def listen(host: str, port: int) -> list[socket.socket]:
    """Rank 0's ends, listening at once (a second sender of the same group fails to bind): an
    abstract Unix socket of the run's on this machine; in a run across nodes also TCP on the
    port, on every interface, as the store of NCCL's group does (its host is the trainer's)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(host, port))
    listener.listen(16)
    if not _across_nodes():
        return [listener]
    return [listener, socket.create_server(("", port), reuse_port=False)]


def connect(host: str, port: int, timeout: float) -> socket.socket:
    """A receiver's end, retrying until the group's timeout as the store's client does."""
    deadline = time.monotonic() + timeout
    while True:
        remote = not _local(host)
        sock = socket.socket(socket.AF_INET if remote else socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if remote:
                sock.close()
                sock = socket.create_connection((host, port), timeout=timeout)
                sock.settimeout(None)  # a receive waits for ever, as NCCL's does
            else:
                sock.connect(_address(host, port))
            return sock
        except OSError:
            sock.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def payload_for(step: int, size: int = PAYLOAD_BYTES) -> bytes:
    """The weights of policy `step` (deterministic, so a receiver can check what arrived)."""
    block = hashlib.sha256(f"policy step {step}".encode()).digest()
    return (block * (size // len(block) + 1))[:size]


@dataclass(frozen=True)
class Received:
    step: int
    digest: str  # sha256 of the payload received


class BroadcastSender:
    """The trainer master's end (rank 0): listens at once; `broadcast` waits for every receiver
    of the group (world_size - 1) to have joined, then sends to each."""

    def __init__(self, host: str, port: int, world_size: int, timeout: float) -> None:
        self._world = max(1, world_size)
        self._timeout = timeout
        self._listeners = listen(host, port)
        self._peers: list[socket.socket] = []

    def _join(self) -> None:
        deadline = time.monotonic() + self._timeout
        while len(self._peers) < self._world - 1:
            ready, _, _ = select.select(self._listeners, [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"{self._world - 1 - len(self._peers)} receiver(s) did not "
                                   f"join the weight broadcast within {self._timeout:g} s")
            peer, _ = ready[0].accept()
            peer.settimeout(None)
            with peer.makefile("rb") as hello:
                json.loads(hello.readline() or b"{}")  # the receiver's rank (not needed here)
            self._peers.append(peer)

    def broadcast(self, step: int, *, fail_midway: bool = False, exit_code: int = 1) -> None:
        """Send policy `step` to every receiver; with `fail_midway`, send the header and half
        the payload, then kill this process (a trainer dying in the middle of a broadcast)."""
        self._join()
        data = payload_for(step)
        header = (json.dumps({"step": step, "size": len(data)}) + "\n").encode()
        for peer in self._peers:
            if fail_midway:
                peer.sendall(header + data[: len(data) // 2])
                os._exit(exit_code)  # dies with its socket half-sent, as a SIGKILL leaves it
            peer.sendall(header + data)

    def close(self) -> None:
        for peer in self._peers:
            with contextlib.suppress(OSError):
                peer.close()
        for listener in self._listeners:
            listener.close()


class BroadcastReceiver:
    """One inference worker's end (rank >= 1), built by `/init_broadcaster`."""

    def __init__(self, host: str, port: int, rank: int, timeout: float) -> None:
        self._sock = connect(host, port, timeout)
        self._sock.sendall((json.dumps({"rank": rank}) + "\n").encode())
        self._file = self._sock.makefile("rb")

    def receive(self) -> Received:
        """The next broadcast. A sender gone mid-way is not noticed: this waits for ever, as a
        NCCL receive from a dead rank does."""
        line = self._file.readline()
        header = json.loads(line) if line.endswith(b"\n") else None
        data = self._file.read(int(header["size"])) if header else b""
        if header is None or len(data) < int(header["size"]):
            threading.Event().wait()  # stuck in the collective
        assert header is not None
        return Received(int(header["step"]), hashlib.sha256(data).hexdigest())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
            self._sock.close()
