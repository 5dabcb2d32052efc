"""The worker contract a plan of a plain model writes, for tests that start a wrapped worker the way a front does."""

from __future__ import annotations

import dataclasses
from typing import Any

from mlx_agent.wire import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, HEDGE_LIMIT, MAX_BODY_BYTES, REASONING_BUDGET, REPEAT_LIMIT
from mlx_agent.worker_contract import CONTRACT_FLAG, WorkerContract, contract_argv

# A model without adapter, template file, group, accelerations or kept cache, under the front's default limits.
PLAIN = WorkerContract(
    file_checks=(),
    chat_template=None,
    model_checks=(),
    tool_parser=None,
    prompt_lookup=False,
    m5_prefill=False,
    versions={},
    sources={},
    context_window=None,
    prompt_cache_disk_gb=0.0,
    max_body_bytes=MAX_BODY_BYTES,
    header_timeout=HEADER_TIMEOUT_S,
    body_timeout=BODY_TIMEOUT_S,
    reasoning_budget=REASONING_BUDGET,
    hedge_limit=HEDGE_LIMIT,
    repeat_limit=REPEAT_LIMIT,
    limit_answers=False,
)


def contract(**changes: Any) -> list[str]:
    """Return the argv words of the plain contract with ``changes`` (field names as keywords)."""
    return contract_argv(dataclasses.replace(PLAIN, **changes))


def with_contract(argv: list[str]) -> list[str]:
    """Return ``argv`` with the plain contract appended, unless it carries one already."""
    return argv if CONTRACT_FLAG in argv else [*argv, *contract()]


# A worker asked for prompt lookup (the plan's fingerprint left empty: nothing to find changed).
LOOKUP = tuple(contract(prompt_lookup=True))
