"""``serve logs``: the front's log and its workers' logs of one port, their last lines, and what follows.

The files are the plan's (the receipt names them); once a server has stopped and its receipt is gone, the
logs beside where it was (``<port>.log``, ``<port>.worker*.log``) are still read. The front writes one request
line per model request (``gateway.observe.request_log``); they are parsed for ``--json`` and filtered by ``--model``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import ReceiptNotFound
from mlx_agent.port_files import PortFiles
from mlx_agent.supervise.receipts import has_front, read_receipt, receipt_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FRONT_SOURCE = "front"
REQUEST_MARK = "mlx-agent front: request "
POLL_SECONDS = 0.2


@dataclass
class LogSource:
    """One log file, the name its lines are shown under, and the model its lines are kept for (if any)."""

    source: str
    path: Path
    model: str | None = None  # on the front's log: keep only this model's lines

    def keeps(self, line: str) -> bool:
        """Say whether a line of this file belongs in the output."""
        if self.model is None or self.source != FRONT_SOURCE:
            return True
        request = request_of(line)
        if request is not None:
            return request.get("model") == self.model
        message = line.split("mlx-agent front: ", 1)[-1]
        return message.startswith(f"{self.model}: ")


def request_of(line: str) -> dict[str, Any] | None:
    """Return the parsed request line, or None for any other line."""
    at = line.find(REQUEST_MARK)
    if at < 0:
        return None
    try:
        doc = json.loads(line[at + len(REQUEST_MARK) :])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def sources(directory: Path, port: int, model: str | None) -> list[LogSource]:
    """Return the logs of ``port``: the front's, then each model's worker (only ``model``'s when given)."""
    path = receipt_path(directory, port)
    if path.exists():
        receipt = read_receipt(path)
        if has_front(receipt):
            models = receipt["plan"]["models"]
            names = [m["served_model_name"] for m in models]
            if model is not None and model not in names:
                raise InvalidArguments(
                    f"--model {model} is not served on port {port}; it serves {', '.join(names)}",
                    details={"port": port, "model": model, "models": names},
                )
            found = [LogSource(FRONT_SOURCE, Path(receipt["log_path"]), model)]
            found += [
                LogSource(m["served_model_name"], Path(m["worker"]["log_path"]))
                for m in models
                if model is None or m["served_model_name"] == model
            ]
            return found
        return [LogSource(FRONT_SOURCE, Path(receipt["log_path"]))]
    if model is not None:
        raise InvalidArguments(
            f"port {port} has no receipt, so its models' names are unknown; leave out --model",
            details={"port": port},
        )
    files = PortFiles(directory, port)
    found = [LogSource(FRONT_SOURCE, files.log)]
    found += [LogSource(p.name, p) for p in files.worker_logs()]
    found = [s for s in found if s.path.exists()]
    if not found:
        raise ReceiptNotFound(f"no receipt and no logs for port {port}", details={"port": port})
    return found


def tail(source: LogSource, count: int) -> tuple[list[str], int]:
    """Return the last ``count`` kept lines of a log and the offset reading should continue from."""
    try:
        data = source.path.read_bytes()
    except FileNotFoundError:
        return [], 0
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if source.keeps(line)]
    return (lines[-count:] if count else []), len(data)


def read_logs(directory: Path, port: int, model: str | None, count: int) -> dict[str, Any]:
    """Return the last lines of every log of ``port``, with the front's request lines parsed."""
    logs = []
    for source in sources(directory, port, model):
        lines, _ = tail(source, count)
        entry: dict[str, Any] = {"source": source.source, "path": str(source.path), "lines": lines}
        if source.source == FRONT_SOURCE:
            entry["requests"] = [r for r in map(request_of, lines) if r is not None]
        logs.append(entry)
    return {"port": port, "model": model, "logs": logs}


def follow(
    directory: Path, port: int, model: str | None, count: int, emit: Callable[[str, str], None]
) -> Iterator[None]:
    """Emit the last lines of each log, then every new line as it is written; yields after each poll.

    A log that shrinks (rewritten) is read again from its start; a log that appears later is picked up.
    """
    found = sources(directory, port, model)
    offsets: dict[str, int] = {}
    partial: dict[str, bytes] = {}
    for source in found:
        lines, offsets[source.source] = tail(source, count)
        for line in lines:
            emit(source.source, line)
    while True:
        for source in found:
            key = source.source
            try:
                size = source.path.stat().st_size
            except FileNotFoundError:
                continue
            if size < offsets.get(key, 0):
                offsets[key], partial[key] = 0, b""
            if size == offsets.get(key, 0):
                continue
            with source.path.open("rb") as fh:
                fh.seek(offsets.get(key, 0))
                data = partial.pop(key, b"") + fh.read()
                offsets[key] = fh.tell()
            *complete, rest = data.split(b"\n")
            partial[key] = rest
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                if source.keeps(line):
                    emit(key, line)
        yield
        time.sleep(POLL_SECONDS)
