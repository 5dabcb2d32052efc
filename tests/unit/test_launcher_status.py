"""The group launcher's exit status: the rank that failed first for a reason, or the signal that stopped it."""

from __future__ import annotations

import signal

import pytest

from mlx_agent.runtime.distributed.launcher import Ranks
from mlx_agent.wire import EXIT_GENERATION_DIED, EXIT_RANK_LOST, EXIT_REFUSED

pytestmark = pytest.mark.fast

STOPPED = 128 + signal.SIGTERM


def ranks(statuses: list[tuple[int, int, bool]], signalled: int | None = None) -> Ranks:
    """Return launcher bookkeeping that saw ``statuses`` in this order, told to stop by ``signalled``."""
    found = Ranks()
    found.statuses = statuses
    found.signalled = signalled
    return found


def test_a_signalled_launcher_exits_as_the_signal_says_whichever_rank_is_seen_first() -> None:
    """A rank that lost its peer to the stop and was seen to exit first does not become the launcher's status."""
    seen = [(1, EXIT_GENERATION_DIED, False), (0, STOPPED, True)]
    assert ranks(seen, signal.SIGTERM).exit_status() == STOPPED
    assert ranks(list(reversed(seen)), signal.SIGTERM).exit_status() == STOPPED
    assert ranks([], signal.SIGHUP).exit_status() == 128 + signal.SIGHUP  # every rank ended cleanly on the stop


def test_without_a_signal_the_first_failure_for_a_reason_is_the_status() -> None:
    """A refusal explains a peer that lost its group; with no cause, the first failure seen is the status."""
    assert ranks([(1, EXIT_RANK_LOST, False), (0, EXIT_REFUSED, False)]).exit_status() == EXIT_REFUSED
    assert ranks([(1, EXIT_GENERATION_DIED, False), (0, STOPPED, True)]).exit_status() == EXIT_GENERATION_DIED
    assert ranks([(0, 0, False), (1, 0, False)]).exit_status() == 0


def test_a_real_cause_before_the_signal_still_names_the_failure() -> None:
    """A rank that refused on its own is the status even when a signal came after it."""
    assert ranks([(0, EXIT_REFUSED, False), (1, STOPPED, True)], signal.SIGTERM).exit_status() == EXIT_REFUSED


def test_a_refusal_seen_after_a_peers_failure_is_the_status_though_we_were_stopping_it() -> None:
    """Rank 1 failed first and rank 0's refusal raced our stop: the refusal still names the cause, unless signalled."""
    seen = [(1, 1, False), (0, EXIT_REFUSED, True)]
    assert ranks(seen).exit_status() == EXIT_REFUSED
    assert ranks(seen, signal.SIGTERM).exit_status() == 1  # a signal's stop: a refusal then may be its consequence


def test_a_refusal_is_the_groups_status_whichever_rank_ended_first() -> None:
    """A rank that refused (status 3) explains a peer that failed with 1 before it: the group exits 3."""
    assert ranks([(1, 1, False), (0, EXIT_REFUSED, False), (1, 70, False)]).exit_status() == EXIT_REFUSED
    assert ranks([(1, 1, False), (0, 70, False)]).exit_status() == 1
