"""The mlx_lm worker's start: what changed since review is refused before mlx_lm is imported, then it serves.

The argv is split once (``contract_entry``: the plan's contract, the front's socket and prompt cache directory,
and mlx_lm's own arguments). The reviewed adapter files (``file_checks``), the ``--chat-template`` file (read
once, its checked bytes kept) and the fingerprint of ``--prompt-lookup``/``--m5-prefill`` (``accel_entry``) are
checked first, and the socket limits set (``socket_limits``: the front's body cap and read deadlines);
``mlx_lm_server`` then serves with the contract and mlx_lm's own arguments.

``--chat-template`` and ``--tool-parser`` reach mlx_lm through its own tokenizer config: ``mlx_lm.server.load``
(a seam, ``seams.SEAMS``) is given ``chat_template`` (what mlx_lm's own ``--chat-template`` puts there: the
tokenizer renders with it, and mlx_lm infers the parser from it) and ``tool_parser_type`` (which
``tokenizer_utils.load`` reads before inferring one). tests/unit/test_tokenizer_options.py fails when mlx_lm
stops reading either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mlx_agent.runtime.entries.accel_entry import accel_flags
from mlx_agent.runtime.entries.accel_entry import refuse_if_changed as refuse_if_runtime_changed
from mlx_agent.runtime.entries.contract_entry import started
from mlx_agent.runtime.entries.file_checks import refuse_if_changed, reviewed_template
from mlx_agent.runtime.serving import socket_limits


def tokenizer_options(chat_template: str | None, tool_parser: str | None) -> dict[str, str]:
    """Return what the worker adds to mlx_lm's tokenizer config for the two options (none: nothing)."""
    options: dict[str, str] = {}
    if chat_template is not None:
        options["chat_template"] = chat_template
    if tool_parser is not None:
        options["tool_parser_type"] = tool_parser
    return options


def with_tokenizer_options(load: Callable[..., Any], options: dict[str, str]) -> Callable[..., Any]:
    """Wrap mlx_lm.server's ``load`` so that its ``tokenizer_config`` carries ``options`` over mlx_lm's own.

    The wrapper keeps ``load``'s signature (``functools.wraps``): the seam check still reads upstream's.
    """

    @functools.wraps(load)
    def loading(*args: Any, **kwargs: Any) -> Any:
        kwargs["tokenizer_config"] = {**(kwargs.get("tokenizer_config") or {}), **options}
        return load(*args, **kwargs)

    return loading


def main(argv: list[str]) -> int:
    """Check what the plan bound, then run the wrapped mlx_lm server; return the process exit status."""
    given, native = started(argv)
    contract = given.contract
    refuse_if_changed(contract.file_checks)  # reviewed adapter files, checked in this process before anything loads
    chat_template = reviewed_template(contract.chat_template)
    accel = accel_flags(contract)
    refuse_if_runtime_changed(accel)  # the reviewed versions and sources of --prompt-lookup/--m5-prefill
    socket_limits.configure(socket_limits.from_contract(contract))  # what the handler reads every request under
    from mlx_agent.runtime.entries.mlx_lm_server import serve  # here: mlx_lm is imported only after the checks

    options = tokenizer_options(chat_template, contract.tool_parser)
    if options:
        import mlx_lm.server as server

        server.load = with_tokenizer_options(server.load, options)  # type: ignore[attr-defined]
    return serve(native, given, accel)
