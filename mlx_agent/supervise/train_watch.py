"""The watcher of one training: ``python -m mlx_agent.supervise.train_watch RECEIPT``.

``lora train --confirm`` starts it in its own session and process group, writes the receipt naming it,
and then sends ``go`` on its stdin. Only then does the watcher start the trainer (the plan's exact argv)
as its child, record the trainer's identity, wait for it, and record how it ended: its real exit status
(never inferred from the output directory), and on exit 0 with both adapter files present, their sha256
and sizes and the pinned base identity. SIGTERM, SIGINT and SIGHUP are passed on to the trainer, whose
exit is then recorded as usual. The trainer is started as every child of mlx-agent is (``mlx_agent.spawn``: its
own session, output appended to the training log) and, on Linux, is killed if the watcher dies, so a killed
watcher never leaves a training running that nothing can record; ``lora status`` reports that as interrupted.

Exit status: 0 once the outcome is recorded (whatever it is), 3 if confirm never said ``go``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from mlx_agent.files import utc_now, write_json_atomic
from mlx_agent.plan.adapter import file_record
from mlx_agent.spawn import spawn
from mlx_agent.supervise import process

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(message: str) -> None:
    """Write one line of the watcher's own to the training log (its stdout)."""
    print(f"mlx-agent lora: {message}", flush=True)


class Watcher:
    """Starts the trainer, forwards stop signals to it, and records its outcome in the receipt."""

    def __init__(self, receipt_path: Path, receipt: dict[str, Any]) -> None:
        self.path = receipt_path
        self.receipt = receipt
        self.plan: dict[str, Any] = receipt["plan"]
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_signal: int | None = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signum
        if self.child is not None and self.child.returncode is None:
            os.kill(self.child.pid, signum)  # not yet reaped, so the pid is still our child's

    def pending_stop(self) -> int | None:
        """Return the stop signal received so far, if any (set from the signal handler)."""
        return self.stop_signal

    def _record(self, **fields: Any) -> None:
        self.receipt.update(fields)
        write_json_atomic(self.path, self.receipt)

    def _config_intact(self) -> bool:
        try:
            return bool(json.loads(Path(self.plan["config_path"]).read_text(encoding="utf-8")) == self.plan["config"])
        except (OSError, ValueError):
            return False

    def _spawn(self) -> subprocess.Popen[bytes]:
        # The trainer appends to the log the watcher writes to; it runs its argv before its identity is read.
        log = Path(self.receipt["log_path"])
        return spawn(self.plan["argv"], self.plan["env"], log, self.plan["cwd"], die_with_parent=True, until_exec=True)

    def _outcome(self, code: int) -> dict[str, Any]:
        fields: dict[str, Any] = {"exit_code": code, "finished_at": utc_now(), "adapter": None}
        if code < 0:
            fields["signal"] = signal.Signals(-code).name
        out = Path(self.plan["adapter_path"])
        missing = [name for name in self.plan["adapter_files"] if not (out / name).is_file()]
        if code != 0:
            reason = f"the trainer was ended by {fields['signal']}" if code < 0 else f"the trainer exited with {code}"
            return {**fields, "state": "failed", "reason": reason}
        if missing:
            return {**fields, "state": "failed", "reason": f"exit 0 but {', '.join(missing)} missing from {out}"}
        files = {}
        for name in self.plan["adapter_files"]:
            record = file_record(out / name)
            files[name] = {"sha256": record["sha256"], "size": record["size"]}
        return {
            **fields,
            "state": "completed",
            "reason": None,
            "adapter": {"path": str(out), "files": files},
            "base": self.plan["base"],
        }

    def run(self) -> int:
        """Start the trainer, wait for it and record how it ended."""
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)
        if not self._config_intact():
            say(f"refusing to start: {self.plan['config_path']} no longer holds the reviewed config")
            self._record(
                state="failed",
                exit_code=None,
                finished_at=utc_now(),
                reason="the -c config file changed after confirm; nothing was trained",
            )
            return 0
        if self.stop_signal is not None:
            self._record(
                state="failed",
                exit_code=None,
                finished_at=utc_now(),
                reason=f"stopped by {signal.Signals(self.stop_signal).name} before the trainer started",
            )
            return 0
        try:
            self.child = self._spawn()
        except OSError as exc:
            say(f"could not start the trainer: {exc}")
            self._record(state="failed", exit_code=None, finished_at=utc_now(), reason=f"could not start: {exc}")
            return 0
        late = self.pending_stop()  # a stop that arrived while the trainer was being forked
        if late is not None:
            os.kill(self.child.pid, late)
        try:
            trainer = {**process.identity(self.child.pid), "argv": self.plan["argv"]}
        except ProcessLookupError:  # it already ended; its exit status is recorded below all the same
            trainer = {
                "pid": self.child.pid,
                "pgid": self.child.pid,  # it leads its own session and group
                "create_time": None,
                "cmdline": None,
                "argv": self.plan["argv"],
            }
        self._record(trainer=trainer, trainer_started_at=utc_now())
        say(f"trainer started, pid {self.child.pid}")
        code = self.child.wait()
        outcome = self._outcome(code)
        say(f"trainer exited with status {code}: {outcome['state']}")
        self._record(**outcome)
        return 0


def _abandon(path: Path) -> None:
    """Record that confirm went away before saying go, if the receipt names this watcher."""
    try:
        receipt = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(receipt, dict) and (receipt.get("watcher") or {}).get("pid") == os.getpid():
        receipt.update(
            state="failed",
            exit_code=None,
            finished_at=utc_now(),
            reason="the confirming command ended before the training started; nothing was trained",
        )
        write_json_atomic(path, receipt)


def main(argv: list[str]) -> int:
    """Wait for confirm's go, then run and record the training named by the receipt at ``argv[0]``."""
    # confirm blocks these signals around our spawn; the mask is inherited, so let them through again.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    path = Path(argv[0])
    if sys.stdin.buffer.read(2) != b"go":
        say("confirm ended before go; not training")
        _abandon(path)
        return 3
    receipt = json.loads(path.read_text(encoding="utf-8"))
    if (receipt.get("watcher") or {}).get("pid") != os.getpid():
        say(f"{path} names another watcher; not training")
        return 3
    return Watcher(path, receipt).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
