"""Before any model data crosses the ring: every link is checked and every rank proves the launch's secret.

MLX's ring backend (``mlx/distributed/ring/ring.cpp``) has each rank listen on its own ports, accept the
first connection on each, and connect to the next rank's; nothing identifies a peer, so a process that
connects (or listens) first is taken as a rank and gets every collective. The backend has no place for a
credential, so ours runs right after the ring forms (``mx.distributed.init``, which sends nothing) and
before mlx_lm's or our first collective:

1. **Links on this host are ours.** For each link (a socket on one of this rank's ports, or to one of the
   next rank's) whose other end is on this host, the process holding that end must be this user's and run as
   the neighbouring rank (``MLX_RANK``). Nothing has been sent on any link yet.
2. **Every rank knows the secret.** Our launcher writes a fresh secret on every rank's stdin
   (``wire.RING_AUTH_ENV``). The ranks exchange fresh nonces, then each sends
   HMAC-SHA256(secret, rank, size, every nonce); each rank checks every other rank's tag. A stranger cannot
   make one, and a tag from another launch or rank does not verify.

Either failing, or not done within ``HANDSHAKE_SECONDS`` (a peer that says nothing), prints the refusal
``ring_peer_unverified`` and exits ``EXIT_REFUSED``; the launcher then stops every rank.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import select
import socket
import threading
import time
from typing import Any, NoReturn

from mlx_agent.errors import RingPeerUnverified, print_refusal
from mlx_agent.runtime.distributed.launch_files import remove_mktemp_file
from mlx_agent.wire import EXIT_REFUSED, RING_AUTH_ENV

HANDSHAKE_SECONDS = 30.0  # every rank is past its init when the handshake starts: the rest is a few collectives
NONCE_BYTES = 16
TAG = b"mlx-agent ring handshake v1"


def refuse(message: str, **details: Any) -> NoReturn:
    """Print the refusal ``ring_peer_unverified`` and exit at once (a collective may still be waiting)."""
    import sys

    error = RingPeerUnverified(message, details=details)
    print(f"mlx-agent: {message}", file=sys.stderr, flush=True)
    print_refusal(error)
    os._exit(EXIT_REFUSED)


def read_secret(timeout: float) -> bytes:
    """Return the secret our launcher wrote as the first line of stdin (hex), read without buffering past it."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([0], [], [], left)[0]:
            refuse("no secret arrived on stdin from the group's launcher", waited_s=timeout)
        chunk = os.read(0, 1)
        if not chunk:
            refuse("stdin closed before the group's launcher wrote its secret")
        line += chunk
    try:
        return bytes.fromhex(line.decode("ascii").strip())
    except ValueError:
        refuse("the group's launcher wrote no secret on stdin")


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return str(ipaddress.ip_address(host.strip("[]"))), int(port)


def ring_links(rank: int, size: int) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """Return this rank's own link addresses and the next rank's, from the hostfile mlx.launch wrote."""
    path = os.environ.get("MLX_HOSTFILE", "")
    with open(path, encoding="utf-8") as fh:
        nodes = json.load(fh)
    mine = {_address(a) for a in nodes[rank]}
    right = {_address(a) for a in nodes[(rank + 1) % size]}
    return mine, right


def _this_host() -> set[str]:
    import psutil

    addresses = {str(a.address).split("%")[0] for nics in psutil.net_if_addrs().values() for a in nics}
    return {a for a in addresses if a} | {"127.0.0.1", "::1"}


def _is_local(ip: str, here: set[str]) -> bool:
    return ip in here or ipaddress.ip_address(ip).is_loopback


def _owner(local: tuple[str, int], remote: tuple[str, int]) -> Any:
    """Return the process of this user holding the socket ``local`` connected to ``remote``, or None."""
    import psutil

    uid = os.getuid()
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids is None or uids.real != uid or proc.pid == os.getpid():
            continue
        try:
            for conn in proc.net_connections(kind="tcp"):
                ends = (conn.laddr.ip, conn.laddr.port), (conn.raddr.ip, conn.raddr.port) if conn.raddr else None
                if ends == (local, remote):
                    return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return None


def check_links(rank: int, size: int) -> int:
    """Refuse unless every link with its other end on this host is held by this user's neighbouring rank.

    Return how many links were checked here (a link to another host is left to the secret).
    """
    import psutil

    mine, right = ring_links(rank, size)
    here = _this_host()
    checked = 0
    links = 0
    for conn in psutil.Process().net_connections(kind="tcp"):
        if conn.status != psutil.CONN_ESTABLISHED or not conn.raddr:
            continue
        local, remote = (conn.laddr.ip, conn.laddr.port), (conn.raddr.ip, conn.raddr.port)
        if local in mine:
            neighbour = (rank - 1) % size
        elif remote in right:
            neighbour = (rank + 1) % size
        else:
            continue
        links += 1
        if not _is_local(remote[0], here):
            continue
        owner = _owner(remote, local)
        link = f"{local[0]}:{local[1]} <- {remote[0]}:{remote[1]}" if local in mine else f"-> {remote[0]}:{remote[1]}"
        if owner is None:
            refuse(
                f"rank {rank}: the link {link} is held by a process that is not this user's; not one of the ranks",
                rank=rank,
                link=link,
                pid=None,
                uid=_socket_uid(remote, local),
            )
        try:
            peer_rank = owner.environ().get("MLX_RANK")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            peer_rank = None
        if peer_rank != str(neighbour):
            refuse(
                f"rank {rank}: the link {link} is held by pid {owner.pid}, which is not rank {neighbour}",
                rank=rank,
                link=link,
                pid=owner.pid,
                uid=os.getuid(),
            )
        checked += 1
    if links < len(mine) + len(right):
        refuse(f"rank {rank}: found {links} of its {len(mine) + len(right)} ring links", rank=rank)
    return checked


def _socket_uid(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """Return the owner uid of the TCP socket ``local``-``remote`` from /proc/net (Linux), if it can be read."""
    try:
        lines = open("/proc/net/tcp", encoding="ascii").read().splitlines()[1:]  # noqa: SIM115
    except OSError:
        return None

    def hexed(address: tuple[str, int]) -> str:
        packed = socket.inet_aton(address[0])
        return f"{int.from_bytes(packed, 'little'):08X}:{address[1]:04X}"

    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == hexed(local) and fields[2] == hexed(remote):
            return int(fields[7])
    return None


def gather(rank: int, size: int, data: bytes) -> list[bytes]:
    """Return every rank's ``data`` (same length on each), through one ``all_sum`` of a row per rank."""
    import mlx.core as mx

    rows = [[0] * len(data) for _ in range(size)]
    rows[rank] = list(data)
    total = mx.distributed.all_sum(mx.array(rows, dtype=mx.int32), stream=mx.cpu)
    mx.eval(total)
    gathered = []
    rows_back: list[list[int]] = total.tolist()  # type: ignore[assignment]  # a 2-d int32 array's rows
    for index, row in enumerate(rows_back):
        if any(not 0 <= value <= 255 for value in row):
            refuse(f"rank {rank}: the handshake's data from rank {index} is not bytes", rank=rank, peer=index)
        gathered.append(bytes(row))
    return gathered


def tag(secret: bytes, rank: int, size: int, nonces: list[bytes]) -> bytes:
    """Return rank ``rank``'s proof of the secret over this handshake's nonces."""
    message = TAG + f"|{rank}|{size}|".encode() + b"".join(nonces)
    return hmac.new(secret, message, hashlib.sha256).digest()


def verify_group(rank: int, size: int) -> None:
    """Check this rank's links and that every rank knows the launch's secret; refuse and exit otherwise.

    Without ``wire.RING_AUTH_ENV`` (the entry run by plain ``mlx.launch``, not by a plan) nothing is checked.
    """
    if size < 2 or os.environ.get(RING_AUTH_ENV) != "stdin":
        return
    import logging

    timer = threading.Timer(
        HANDSHAKE_SECONDS, refuse, (f"rank {rank}: the group's handshake did not finish in {HANDSHAKE_SECONDS:.0f} s",)
    )
    timer.daemon = True
    timer.start()
    try:
        secret = read_secret(HANDSHAKE_SECONDS)
        checked = check_links(rank, size) if os.environ.get("MLX_HOSTFILE") else 0
        nonces = gather(rank, size, os.urandom(NONCE_BYTES))
        tags = gather(rank, size, tag(secret, rank, size, nonces))
        for peer, proof in enumerate(tags):
            if peer != rank and not hmac.compare_digest(proof, tag(secret, peer, size, nonces)):
                refuse(f"rank {rank}: rank {peer} did not prove this launch's secret", rank=rank, peer=peer)
    finally:
        timer.cancel()
    logging.info(
        "mlx-agent: rank %d of %d: every rank proved the launch's secret (%d link(s) here checked)", rank, size, checked
    )
    # A rank's hosts file (mlx.launch's script writes a remote rank's, our launcher a local one's) is not read
    # again: the ring has formed (MLX keeps its group) and the links are checked. Nothing else removes a remote
    # one, nor any under plain mlx.launch.
    remove_mktemp_file(os.environ.get("MLX_HOSTFILE"))
