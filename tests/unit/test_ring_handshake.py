"""The ring handshake's parts: the secret read from stdin, and tags bound to the secret, the rank and the nonces."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mlx_agent.runtime.distributed.handshake import tag
from mlx_agent.wire import EXIT_REFUSED, REFUSAL_PREFIX
from tests.fixtures.group import REPO_ROOT

READ = "import sys; from mlx_agent.runtime.distributed.handshake import read_secret; print(read_secret({t}).hex())"


def read_secret_in_child(stdin: bytes | None, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``read_secret`` in a child with ``stdin`` written to it (None: written nothing, left open)."""
    code = READ.format(t=timeout) + "; sys.stdout.write(sys.stdin.read())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    if stdin is None:
        proc.wait(timeout=30)
        out, err = proc.communicate()
    else:
        out, err = proc.communicate(stdin, timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_secret_is_the_first_line_of_stdin_and_nothing_past_it_is_read() -> None:
    """read_secret takes the hex line and leaves the rest of stdin unread for the rank."""
    done = read_secret_in_child(b"00ff10\nthe rest\n", 5)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == ["00ff10", "the rest"]


def test_no_secret_in_time_or_not_hex_is_refused() -> None:
    """A launcher that writes nothing (plain mlx.launch with our variable) or not hex: ring_peer_unverified, 3."""
    for stdin in (None, b"not hex\n"):
        done = read_secret_in_child(stdin, 0.5)
        assert done.returncode == EXIT_REFUSED, done.stderr
        [line] = [x for x in done.stderr.decode().splitlines() if x.startswith(REFUSAL_PREFIX)]
        assert json.loads(line[len(REFUSAL_PREFIX) :])["code"] == "ring_peer_unverified"


@pytest.mark.fast
def test_a_tag_is_bound_to_the_secret_the_rank_the_size_and_every_nonce() -> None:
    """Changing any input of a tag changes it: no tag stands for another rank, launch or handshake."""
    nonces = [b"a" * 16, b"b" * 16]
    mine = tag(b"secret", 0, 2, nonces)
    others = [
        tag(b"secreT", 0, 2, nonces),
        tag(b"secret", 1, 2, nonces),
        tag(b"secret", 0, 3, [*nonces, b"c" * 16]),
        tag(b"secret", 0, 2, [b"a" * 16, b"B" * 16]),
    ]
    assert mine == tag(b"secret", 0, 2, list(nonces)) and len(mine) == 32
    assert all(other != mine for other in others)
