"""The JSON envelope, human rendering on stderr/stdout, and the conversion of errors to exit codes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from mlx_agent.errors import MlxAgentError
from mlx_agent.wire import ENVELOPE_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NoReturn, TypedDict, TypeVar

    from mlx_agent.records.plan import ServePlan
    from mlx_agent.records.receipt import ServeReceipt
    from mlx_agent.records.training import TrainingReceipt

    Result = tuple[dict[str, Any], list[str]]
    Data = TypeVar("Data", bound=Mapping[str, Any])  # what one command's action returns and its renderer reads

    class Previewed(TypedDict):
        """``serve start``'s preview: the plan to review."""

        plan: ServePlan
        requires_confirmation: bool

    class Launched(TypedDict):
        """``serve start --confirm``: the receipt of what was launched or installed, and where it is."""

        receipt: ServeReceipt
        receipt_path: str
        requires_confirmation: bool

    class TrainingStarted(TypedDict):
        """``lora train --confirm``: the receipt of the training started detached, and where it is."""

        receipt: TrainingReceipt
        receipt_path: str
        requires_confirmation: bool


def envelope(
    operation: str, data: Mapping[str, Any] | None, warnings: list[str], error: MlxAgentError | None = None
) -> dict[str, Any]:
    """Return the one JSON document a ``--json`` command prints."""
    doc: dict[str, Any] = {
        "format_version": ENVELOPE_VERSION,
        "operation": operation,
        "status": "error" if error else "ok",
        "data": data or {},
        "warnings": warnings,
    }
    if error is not None:
        doc["error"] = error.to_dict()
    return doc


def emit_json(doc: dict[str, Any]) -> None:
    """Print ``doc`` as the only document on stdout."""
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


def fail(operation: str, error: MlxAgentError, as_json: bool, data: dict[str, Any] | None = None) -> NoReturn:
    """Report ``error`` in the chosen form and exit with its code."""
    if as_json:
        emit_json(envelope(operation, data, [], error))
    else:
        from mlx_agent.cli.render import render_error

        render_error(error)
    sys.exit(error.exit_code)


def run(
    operation: str,
    as_json: bool,
    action: Callable[[], tuple[Data, list[str]]],
    render: Callable[[Data, list[str]], None],
) -> None:
    """Run ``action``; print its result as the envelope or through ``render``; turn errors into exits."""
    try:
        data, warnings = action()
    except MlxAgentError as exc:
        fail(operation, exc, as_json)
    if as_json:
        emit_json(envelope(operation, data, warnings))
    else:
        render(data, warnings)
