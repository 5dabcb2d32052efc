"""A group's ring links belong to its ranks only: a stranger who takes one is refused before any data reaches it.

MLX's ring backend takes the first connection on each rank's port as its peer (docs/distributed.md, "Who can
join a group"). Here a second user races rank 0's link port and listens on rank 1's, and a process of our
own user that runs as rank 1 but lacks the launch's secret joins the ring: both groups refuse to form
(``ring_peer_unverified``, every rank stopped) before the first collective of the model.

Each group and its attacker run in a network namespace of the test's own with only loopback up (``ip netns``,
root only), so the ports they race for are theirs alone: nothing else on the machine can take them first or
be reached by a stray connection, and the run is the same on every machine.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.wire import EXIT_REFUSED
from tests.agents_support import Namespace
from tests.conditions import wait_until
from tests.fixtures.group import Group, end_group, entry_command, free_port, launcher_argv, refusals, start_group

pytestmark = pytest.mark.e2e
FIRST_RING_PORT = 12000  # in the test's own namespace every port is free: the group's links start here

# The racer: listen on rank 1's port, connect to rank 0's until it is taken (and say so), then count every byte
# either link receives; print the count when told to stop (a line on stdin).
RACER = textwrap.dedent(
    """
    import select, socket, sys, time
    first = int(sys.argv[1])
    squat = socket.socket()
    squat.bind(("127.0.0.1", first + 1))
    squat.listen()
    print("racing", flush=True)
    while True:
        link = socket.socket()
        try:
            link.connect(("127.0.0.1", first))
            break
        except OSError:
            link.close()
            time.sleep(0.001)
    print("linked", flush=True)
    links, received = [link], 0
    while True:
        ready = select.select([sys.stdin, squat, *links], [], [], 1.0)[0]
        if sys.stdin in ready:
            break
        if squat in ready:
            links.append(squat.accept()[0])
        for sock in [s for s in ready if s in links]:
            data = sock.recv(65536)
            received += len(data)
            if not data:
                links.remove(sock)
    print(f"received {received}", flush=True)
    """
)

# A process of our own user that runs as rank 1 and joins the ring as MLX lets it, but cannot know the secret.
IMPOSTOR = textwrap.dedent(
    """
    import os, time
    import mlx.core as mx
    from mlx_agent.runtime.distributed import handshake
    group = mx.distributed.init()
    nonces = handshake.gather(group.rank(), group.size(), os.urandom(handshake.NONCE_BYTES))
    handshake.gather(group.rank(), group.size(), handshake.tag(b"a guess", group.rank(), group.size(), nonces))
    time.sleep(60)
    """
)


# A process of our own user that runs as rank 1, joins the ring and then says nothing.
SILENT = "import time, mlx.core as mx; mx.distributed.init(); time.sleep(120)"


@pytest.fixture
def racer(namespace: Namespace, attacker: pwd.struct_passwd) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Start the racer as the second user in the namespace, on the group's 2 link ports; stop it afterwards."""
    first = FIRST_RING_PORT
    argv = ["setpriv", f"--reuid={attacker.pw_uid}", f"--regid={attacker.pw_gid}", "--clear-groups"]
    proc = subprocess.Popen(
        [*namespace.prefix, *argv, sys.executable, "-c", RACER, str(first)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "racing", proc.stderr
    yield proc, first
    proc.kill()
    proc.wait()


def test_a_second_user_racing_for_the_links_is_refused_and_gets_nothing(
    namespace: Namespace,
    racer: tuple[subprocess.Popen[str], int],
    attacker: pwd.struct_passwd,
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    """A second user taking rank 0's link first (and rank 1's port) ends the group; not a byte reaches it."""
    proc, first = racer
    entry = entry_command(tiny_model, "--host", "127.0.0.1", "--port", str(free_port()))
    # Rank 1 starts once the racer has connected to rank 0's port, so the racer is surely first there.
    gate = tmp_path / "racer-linked"  # a FIFO: rank 1 reads a line from it before it starts
    os.mkfifo(gate)
    command = ["bash", "-c", 'if [ "$MLX_RANK" = 1 ]; then read -r _ < "$0"; fi; exec "$@"', str(gate), *entry]
    group = start_group(Group([*namespace.prefix, *launcher_argv(command, first_port=first)], tmp_path / "raced.log"))
    release = os.open(gate, os.O_RDWR)  # held open until the group ends, so the line waits for rank 1 to read it
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True).start()
        wait_until(lambda: lines or group.process.poll() is not None, "the racer to connect to rank 0's port", 120)
        assert lines == ["linked\n"], group.log()[-3000:]
        os.write(release, b"go\n")
        status = group.wait_exit(120)
    finally:
        end_group(group)
        os.close(release)
    assert status == EXIT_REFUSED, group.log()[-3000:]
    assert group.launch_files_left() == []
    (refusal,) = refusals(group.log())
    assert refusal["code"] == "ring_peer_unverified" and refusal["details"]["rank"] == 0, refusal
    assert refusal["details"]["uid"] == attacker.pw_uid and refusal["details"]["pid"] is None
    assert "every rank has loaded" not in group.log()
    out, _ = proc.communicate("stop\n", timeout=30)
    assert out.strip().splitlines()[-1] == "received 0", out


def run_with_rank_1(namespace: Namespace, code: str, tiny_model: Path, log: Path) -> tuple[int, str]:
    """Run a group whose rank 1 is ``code`` (Python, as our user, under our launcher) in ``namespace``.

    Return the launcher's status and the group's log, once it has checked that no file of the group was left.
    """
    entry = entry_command(tiny_model, "--host", "127.0.0.1", "--port", str(free_port()))
    command = ["bash", "-c", 'if [ "$MLX_RANK" = 1 ]; then exec "$0" -c "$1"; fi; shift; exec "$@"']
    command += [sys.executable, code, *entry]
    group = start_group(Group([*namespace.prefix, *launcher_argv(command, first_port=FIRST_RING_PORT)], log))
    try:
        status = group.wait_exit(120)
    finally:
        end_group(group)
    assert group.launch_files_left() == [], group.log()[-3000:]
    return status, group.log()


def test_a_rank_without_the_launchs_secret_ends_the_group(
    namespace: Namespace, tiny_model: Path, tmp_path: Path
) -> None:
    """A process of our user that runs as rank 1 but lacks the secret passes the link check, not the proof."""
    status, log = run_with_rank_1(namespace, IMPOSTOR, tiny_model, tmp_path / "impostor.log")
    assert status == EXIT_REFUSED, log[-3000:]
    (refusal,) = refusals(log)
    assert refusal["code"] == "ring_peer_unverified" and refusal["details"] == {"rank": 0, "peer": 1}, refusal
    assert "every rank has loaded" not in log


def test_a_peer_that_joins_the_ring_and_says_nothing_ends_the_group(
    namespace: Namespace, tiny_model: Path, tmp_path: Path
) -> None:
    """A rank 1 that never takes part in the handshake ends the group once its time is up, before any load."""
    status, log = run_with_rank_1(namespace, SILENT, tiny_model, tmp_path / "silent.log")
    assert status == EXIT_REFUSED, log[-3000:]
    (refusal,) = refusals(log)
    assert refusal["code"] == "ring_peer_unverified" and "did not finish" in refusal["message"], refusal
    assert "loading" not in log
