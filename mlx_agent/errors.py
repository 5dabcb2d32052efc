"""The one exception tree of mlx-agent.

Every failure a user can cause or meet is a leaf below, with a stable snake_case ``code``, an
``exit_code`` (1 refused or failed, 2 usage error) and a one-sentence ``remediation``. The CLI turns
them into the JSON envelope at its boundary only; anything else reaching it is a bug.

    MlxAgentError
    ├── UsageError (exit 2)
    │   ├── InvalidArguments ................ invalid_arguments
    │   ├── ModelsFileInvalid ............... models_file_invalid
    │   └── ModelsNameConflict .............. models_name_conflict
    ├── PreviewError
    │   ├── PreviewHashRequired ............. preview_hash_required
    │   └── PreviewStale .................... preview_stale
    │       ├── AdapterChanged .............. adapter_changed
    │       ├── ModelChanged ................ model_changed
    │       └── RuntimeChanged .............. runtime_changed
    ├── SourceError
    │   ├── ModelNotLocal ................... model_not_local
    │   ├── ModelInvalid .................... model_invalid
    │   ├── DraftModelMismatch .............. draft_model_mismatch
    │   ├── ConfigMissing ................... config_missing
    │   ├── ConfigUnparsable ................ config_unparsable
    │   ├── ConfigNotObject ................. config_not_object
    │   └── AdapterInvalid .................. adapter_invalid
    ├── RuntimeSelectionError
    │   ├── RuntimeNotInstalled ............. runtime_not_installed
    │   ├── RuntimeNotExecutable ............ runtime_not_executable
    │   ├── RuntimeSymlinkLoop .............. runtime_symlink_loop
    │   ├── UnsupportedRuntime .............. unsupported_runtime
    │   ├── TrustRemoteCodeRefused .......... trust_remote_code_refused
    │   ├── DistributedUnsupported .......... distributed_unsupported
    │   ├── UnsupportedModel ................ unsupported_model
    │   └── RuntimeModelMismatch ............ runtime_model_mismatch
    ├── PortError
    │   ├── PortInUse ....................... port_in_use
    │   ├── RingPortInUse ................... ring_port_in_use
    │   └── PortClaimed ..................... port_claimed
    ├── LaunchError
    │   ├── LaunchFailed .................... launch_failed
    │   ├── ReadinessTimeout ................ readiness_timeout
    │   ├── LaunchInterrupted ............... launch_interrupted
    │   └── RingPeerUnverified .............. ring_peer_unverified
    ├── ReceiptError
    │   ├── ReceiptNotFound ................. receipt_not_found
    │   ├── ReceiptCorrupt .................. receipt_corrupt
    │   ├── ReceiptVersionUnsupported ....... receipt_version_unsupported
    │   ├── StateDirUnsafe .................. state_dir_unsafe
    │   └── StateWriteFailed ................ state_write_failed
    ├── TrainingError
    │   ├── DatasetNotFound ................. dataset_not_found
    │   ├── DatasetInvalid .................. dataset_invalid
    │   ├── AdapterPathNotEmpty ............. adapter_path_not_empty
    │   ├── TrainingRunning ................. training_running
    │   ├── TrainingIncomplete .............. training_incomplete
    │   └── BaseModelChanged ................ base_model_changed
    ├── UnitError
    │   ├── UnitNotOwned .................... unit_not_owned
    │   ├── UnitModified .................... unit_modified
    │   ├── LaunchdJitUnsupported ........... launchd_jit_unsupported
    │   └── LaunchdTrainingReceiptUnsupported  launchd_training_receipt_unsupported
    ├── GatewayError
    │   ├── NoFront ......................... no_front
    │   ├── ExpectedPidMismatch ............. expected_pid_mismatch
    │   ├── GatewayUnreachable .............. gateway_unreachable
    │   ├── UnloadBlocked ................... unload_blocked
    │   ├── PolicyRejected .................. policy_rejected
    │   ├── FrontConfigInvalid .............. front_config_invalid
    │   ├── InsufficientHeadroom ............ insufficient_headroom
    │   ├── MemoryUnknown ................... memory_unknown
    │   └── TooManyLoaded ................... too_many_loaded
    ├── WiringError
    │   ├── UnknownAgent .................... unknown_agent
    │   ├── WireScopeUnsupported ............ wire_scope_unsupported
    │   ├── AgentConfigUnparsable ........... agent_config_unparsable
    │   ├── ConfigSymlinkEscapes ............ config_symlink_escapes
    │   ├── AlreadyWired .................... already_wired
    │   ├── NotWired ........................ not_wired
    │   └── WiredServerMismatch ............. wired_server_mismatch
    ├── AgentRunError
    │   ├── NoServer ........................ no_server
    │   ├── ModelNotServed .................. model_not_served
    │   └── AgentNotFound ................... agent_not_found
    ├── PullError
    │   ├── HubUnreachable .................. hub_unreachable
    │   ├── RepoNotFound .................... repo_not_found
    │   ├── NotEnoughDisk ................... not_enough_disk
    │   ├── DownloadInterrupted ............. download_interrupted
    │   └── DownloadCorrupt ................. download_corrupt
    ├── RequestRefused ...................... (its own code: an HTTP error answer of the front or a worker)
    ├── SeamChanged ......................... seam_changed
    ├── OwnershipMismatch ................... ownership_mismatch
    └── LockTimeout ......................... lock_timeout

Outside the tree, because they are signals inside the servers rather than errors a user meets:

    HttpError (BaseException) ............... a worker's HTTP error answer, raised through mlx_lm's handler
    ClientGone (BaseException) .............. the worker's client hung up; nothing more is written
    BodyInvalid ............................. a request body its endpoint's declaration refuses (front and worker)
    TemplateFailed, SchemaFailed ............ the generation thread could not render a prompt or a schema
    ContextLengthExceeded ................... the prompt does not fit the model's context
    EmptyPrompt ............................. the prompt renders to no token at all (nothing to continue)
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn


class MlxAgentError(Exception):
    """Base of every error mlx-agent reports to a user."""

    code = "internal_error"
    exit_code = 1
    remediation = "Report this as a bug with the command you ran."

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, remediation: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if remediation is not None:
            self.remediation = remediation

    def to_dict(self) -> dict[str, Any]:
        """Return the envelope's ``error`` object."""
        return {
            "code": self.code,
            "message": self.message,
            "remediation": self.remediation,
            "details": self.details,
        }


def error_class(code: str) -> type[MlxAgentError] | None:
    """Return the error class with this code, for errors reported by a child process in its log."""
    pending: list[type[MlxAgentError]] = [MlxAgentError]
    while pending:
        cls = pending.pop()
        if cls.code == code and not cls.__subclasses__():
            return cls
        pending.extend(cls.__subclasses__())
    return None


def refusal_line(error: MlxAgentError) -> str:
    """Return the one line a child prints on stderr before it exits refusing to serve (``wire.REFUSAL_PREFIX``)."""
    import json

    from mlx_agent.wire import REFUSAL_PREFIX

    return REFUSAL_PREFIX + json.dumps({"code": error.code, "message": error.message, "details": error.details})


def print_refusal(error: MlxAgentError) -> None:
    """Write ``error``'s refusal line to stderr in one write.

    ``print`` writes the newline apart from the line (stderr writes through), and a group's ranks share one log:
    another rank's line could land between them and spoil the refusal's JSON for its reader.
    """
    import sys

    sys.stderr.write(refusal_line(error) + "\n")
    sys.stderr.flush()


def exit_refused(error: MlxAgentError) -> NoReturn:
    """Print ``error``'s refusal line and exit with ``wire.EXIT_REFUSED`` (a child that will not serve)."""
    import sys

    from mlx_agent.wire import EXIT_REFUSED

    print_refusal(error)
    sys.exit(EXIT_REFUSED)


def from_refusal_lines(lines: list[str], details: dict[str, Any]) -> MlxAgentError | None:
    """Return the error of the last refusal line among a child's log lines (with ``details`` added), if any."""
    import json

    from mlx_agent.wire import REFUSAL_PREFIX

    for line in reversed(lines):
        if not line.startswith(REFUSAL_PREFIX):
            continue
        try:
            report = json.loads(line[len(REFUSAL_PREFIX) :])
            cls = error_class(report["code"])
        except (ValueError, KeyError, TypeError):
            return None
        if cls is None:
            return None
        return cls(str(report.get("message", report["code"])), details={**details, **(report.get("details") or {})})
    return None


class UsageError(MlxAgentError):
    """The command line itself is wrong."""

    exit_code = 2


class InvalidArguments(UsageError):
    code = "invalid_arguments"
    remediation = "Fix the named option; `mlx-agent serve start --help` lists them."


class ModelsFileInvalid(UsageError):
    code = "models_file_invalid"
    remediation = "Fix the models file at the line and key named in details; each [[model]] takes serve start's keys."


class ModelsNameConflict(UsageError):
    code = "models_name_conflict"
    remediation = "Give every model a name and aliases of its own, so a request's model reaches one model only."


class PreviewError(MlxAgentError):
    """The confirm step does not match a reviewed preview."""


class PreviewHashRequired(PreviewError):
    code = "preview_hash_required"
    remediation = "Run the same command without --confirm, review the plan, then pass its --preview-hash."


class PreviewStale(PreviewError):
    code = "preview_stale"
    remediation = "Run the command without --confirm again, review the new plan, and confirm its hash."


class AdapterChanged(PreviewStale):
    code = "adapter_changed"
    remediation = (
        "The adapter files changed since they were reviewed; preview again (and retrain if the change "
        "was not intended)."
    )


class ModelChanged(PreviewStale):
    code = "model_changed"
    remediation = (
        "The model's files changed since the plan was reviewed (details.changed lists them); restore them, or "
        "preview and confirm a new plan."
    )


class RuntimeChanged(PreviewStale):
    code = "runtime_changed"
    remediation = (
        "The dependencies or bundled sources of --prompt-lookup/--m5-prefill changed since the plan was "
        "reviewed; run the command without --confirm again and confirm the new hash."
    )


class SourceError(MlxAgentError):
    """The model source cannot be served from local files."""


class ModelNotLocal(SourceError):
    code = "model_not_local"
    remediation = (
        "Fetch it with mlx-agent pull ORG/NAME (serving never downloads), or pass --path with an "
        "absolute local model directory."
    )


class ModelInvalid(SourceError):
    code = "model_invalid"
    remediation = "Point --path at a model directory holding config.json, tokenizer files and weights."


class DraftModelMismatch(SourceError):
    code = "draft_model_mismatch"
    remediation = (
        "Give --draft-model a smaller model with the served model's tokenizer vocabulary (the same family), "
        "or leave it out."
    )


class ConfigMissing(SourceError):
    code = "config_missing"
    remediation = "Point --path at a model directory; it must hold the model's config.json."


class ConfigUnparsable(SourceError):
    code = "config_unparsable"
    remediation = "Repair or re-download the model's config.json; it must be valid JSON."


class ConfigNotObject(SourceError):
    code = "config_not_object"
    remediation = "Repair or re-download the model's config.json; it must hold one JSON object."


class AdapterInvalid(SourceError):
    code = "adapter_invalid"
    remediation = (
        "Point --adapter-path at a real directory (no symlinks) with a valid adapter_config.json and "
        "adapters.safetensors, as mlx_lm.lora writes them."
    )


class RuntimeSelectionError(MlxAgentError):
    """The requested runtime cannot run here."""


class RuntimeNotInstalled(RuntimeSelectionError):
    code = "runtime_not_installed"
    remediation = (
        "Install the runtime into the environment that runs it (the error's details.install_command; for mlx-vlm: "
        "pip install 'mlx-agent[vlm]'); mlx-agent never installs runtimes."
    )


class RuntimeNotExecutable(RuntimeSelectionError):
    code = "runtime_not_executable"
    remediation = "Give --runtime-executable a file with execute permission (chmod +x) or another path."


class RuntimeSymlinkLoop(RuntimeSelectionError):
    code = "runtime_symlink_loop"
    remediation = "Fix the symbolic links of the runtime executable so they end at a real file."


class UnsupportedModel(RuntimeSelectionError):
    code = "unsupported_model"
    remediation = "Serve a model whose model_type the installed mlx-lm or mlx-vlm supports, or upgrade them yourself."


class RuntimeModelMismatch(RuntimeSelectionError):
    code = "runtime_model_mismatch"
    remediation = "Use --runtime mlx-vlm (or auto) for a vision model; mlx_lm cannot load its vision tower."


class UnsupportedRuntime(RuntimeSelectionError):
    code = "unsupported_runtime"
    remediation = "Choose a runtime that mlx-agent has a recipe for: see `mlx-agent serve start --help`."


class TrustRemoteCodeRefused(RuntimeSelectionError):
    code = "trust_remote_code_refused"
    remediation = (
        "Serve a model whose architecture the installed mlx-lm or mlx-vlm implements itself, without "
        "--trust-remote-code: no plan reviews Python code shipped in a model's folder."
    )


class DistributedUnsupported(RuntimeSelectionError):
    code = "distributed_unsupported"
    remediation = (
        "Serve this model in one process, or give a group what the installed mlx_lm can run across ranks: an "
        "architecture with tensor (shard) or pipeline support, --pipeline only with model.safetensors.index.json, "
        "no adapter, draft model, prompt lookup or M5 kernel, and a backend this mlx has."
    )


class PortError(MlxAgentError):
    """The port cannot be used for this server."""


class PortInUse(PortError):
    code = "port_in_use"
    remediation = "Stop what listens there (`mlx-agent serve stop --port N` if it is ours) or choose another --port."


class RingPortInUse(PortError):
    code = "ring_port_in_use"
    remediation = (
        "Choose another --ring-port (the group takes one port per host and IP from it), or leave --ring-port out "
        "and confirm picks a free run."
    )


class PortClaimed(PortError):
    code = "port_claimed"
    remediation = "Choose another --port; a wired config expects a different server on this one."


class LaunchError(MlxAgentError):
    """The server process did not become ready; nothing was left running."""


class LaunchFailed(LaunchError):
    code = "launch_failed"
    remediation = "Read the log lines in details.log_tail (the full log is at details.log_path) and fix the cause."


class ReadinessTimeout(LaunchError):
    code = "readiness_timeout"
    remediation = "Raise --ready-timeout for large models, or read details.log_tail for why loading stalled."


class LaunchInterrupted(LaunchError):
    code = "launch_interrupted"
    remediation = "The launch was interrupted and the server stopped; run the confirm step again."


class RingPeerUnverified(LaunchError):
    code = "ring_peer_unverified"
    remediation = (
        "A process that is not one of the group's ranks took one of its links (details name the link); nothing was "
        "sent to it and every rank stopped. Find who listens or connects there (details.pid, details.uid), then "
        "confirm again."
    )


class ReceiptError(MlxAgentError):
    """A receipt is missing or unreadable."""


class ReceiptNotFound(ReceiptError):
    code = "receipt_not_found"
    remediation = (
        "Check --port and use the same --receipts-dir as at start; `mlx-agent serve status` lists known servers."
    )


class ReceiptCorrupt(ReceiptError):
    code = "receipt_corrupt"
    remediation = "Inspect the file named in details.path; if no server of ours runs on that port, delete the file."


class ReceiptVersionUnsupported(ReceiptError):
    code = "receipt_version_unsupported"
    remediation = "Upgrade mlx-agent; this receipt was written by a newer major version."


class StateDirUnsafe(ReceiptError):
    code = "state_dir_unsafe"
    remediation = (
        "Use a state directory (MLX_AGENT_HOME, --receipts-dir) that you own and that group and others cannot "
        "write (chmod 700), holding regular files of yours, not links."
    )


class StateWriteFailed(ReceiptError):
    code = "state_write_failed"
    remediation = "Free space on (or fix the permissions of) the file system named in details.path, then run it again."


class TrainingError(MlxAgentError):
    """A LoRA training cannot start, or its receipt does not vouch for a usable adapter."""


class DatasetNotFound(TrainingError):
    code = "dataset_not_found"
    remediation = "Give --data an existing local directory holding train.jsonl (and valid.jsonl)."


class DatasetInvalid(TrainingError):
    code = "dataset_invalid"
    remediation = (
        "Give --data a directory whose train.jsonl (and valid.jsonl, unless --val-batches 0) hold at "
        "least --batch-size JSON lines of text, messages, or prompt and completion."
    )


class AdapterPathNotEmpty(TrainingError):
    code = "adapter_path_not_empty"
    remediation = (
        "Choose a new --adapter-path, or move that directory's contents away yourself; training writes "
        "only into an absent or empty directory."
    )


class TrainingRunning(TrainingError):
    code = "training_running"
    remediation = (
        "Wait for the running training (see `mlx-agent lora status`) to finish, or choose another --adapter-path."
    )


class TrainingIncomplete(TrainingError):
    code = "training_incomplete"
    remediation = "Use the receipt of a completed training; `mlx-agent lora status` shows each one's state and its log."


class BaseModelChanged(TrainingError):
    code = "base_model_changed"
    remediation = (
        "Restore the base model files the adapter was trained on (details.changes lists them), or train "
        "a new adapter on the current base."
    )


class UnitError(MlxAgentError):
    """A launchd or systemd unit file is not ours to write or remove."""


class UnitNotOwned(UnitError):
    code = "unit_not_owned"
    remediation = "Move or remove that unit file yourself, or choose another --port; mlx-agent overwrites only its own."


class UnitModified(UnitError):
    code = "unit_modified"
    remediation = (
        "The unit file changed since mlx-agent wrote it; inspect it and remove it yourself if it is no longer wanted."
    )


class LaunchdJitUnsupported(UnitError):
    code = "launchd_jit_unsupported"
    remediation = (
        "Drop --jit for a unit (a unit's server loads its model when it starts), or drop "
        "--launchd/--systemd and let mlx-agent supervise the JIT server."
    )


class LaunchdTrainingReceiptUnsupported(UnitError):
    code = "launchd_training_receipt_unsupported"
    remediation = (
        "Serve a training receipt supervised (without --launchd/--systemd); the adapter binding is "
        "rechecked only by supervised and JIT starts."
    )


class GatewayError(MlxAgentError):
    """A control request to a server's front could not be made or was refused."""


class NoFront(GatewayError):
    code = "no_front"
    remediation = (
        "Use this command on a server mlx-agent supervises; a unit-owned server, or one started by an "
        "older mlx-agent, has no front to control."
    )


class ExpectedPidMismatch(GatewayError):
    code = "expected_pid_mismatch"
    remediation = "Read the gateway's pid from `mlx-agent serve status --port N` and pass it as --expected-pid."


class GatewayUnreachable(GatewayError):
    code = "gateway_unreachable"
    remediation = "Check `mlx-agent serve status --port N`; restart the gateway if it no longer answers."


class UnloadBlocked(GatewayError):
    code = "unload_blocked"
    remediation = "Wait until the open requests and streams in details end, then unload again."


class PolicyRejected(GatewayError):
    code = "policy_rejected"
    remediation = "Fix the policy values named in details and run `mlx-agent serve policy` again."


class FrontConfigInvalid(GatewayError):
    code = "front_config_invalid"
    remediation = (
        "Preview and confirm the server again: the front's config, control token, key file or "
        "persisted policy is missing or invalid."
    )


class InsufficientHeadroom(GatewayError):
    code = "insufficient_headroom"
    remediation = (
        "Free memory, lower --min-headroom-gb, or let an idle model go (details.held_by lists what is "
        "loaded); a request may retry after Retry-After."
    )


class MemoryUnknown(GatewayError):
    code = "memory_unknown"
    remediation = (
        "Serve a model with safetensors weights, or drop --min-headroom-gb: its size or free memory is unknown."
    )


class TooManyLoaded(GatewayError):
    code = "too_many_loaded"
    remediation = "Wait for the busy models in details.held_by to finish, or raise --max-loaded."


class WiringError(MlxAgentError):
    """An agent config file could not be wired to a server or unwired."""


class UnknownAgent(WiringError):
    code = "unknown_agent"
    exit_code = 2
    remediation = "Name one of the agents in details.agents (claude, codex, opencode)."


class WireScopeUnsupported(WiringError):
    code = "wire_scope_unsupported"
    exit_code = 2
    remediation = "Wire this agent with --scope user; it reads no project file for these settings."


class AgentConfigUnparsable(WiringError):
    code = "agent_config_unparsable"
    remediation = "Fix the file at details.path near details.line (or move it aside), then preview again."


class ConfigSymlinkEscapes(WiringError):
    code = "config_symlink_escapes"
    remediation = "Edit the link's target yourself, or replace the link with a regular file, then preview again."


class AlreadyWired(WiringError):
    code = "already_wired"
    remediation = "Run mlx-agent unwire for this agent and scope first (details.record), then wire again."


class NotWired(WiringError):
    code = "not_wired"
    remediation = "Run mlx-agent wire status to see what is wired; nothing was changed."


class WiredServerMismatch(WiringError):
    code = "wired_server_mismatch"
    remediation = (
        "Preview again against the server now on the port (mlx-agent serve status shows it), "
        "or start the one you meant."
    )


class AgentRunError(MlxAgentError):
    """An agent could not be pointed at a server (``run``, ``wire env``): no server, no such model or agent."""


class NoServer(AgentRunError):
    code = "no_server"
    remediation = (
        "Start one with `mlx-agent serve start --port N ... --confirm`, or name the port of a running one "
        "(`mlx-agent serve status` lists them; use the same --receipts-dir)."
    )


class ModelNotServed(AgentRunError):
    code = "model_not_served"
    exit_code = 2
    remediation = "Name one of details.served (a served name or a literal alias), or leave --model out for the first."


class AgentNotFound(AgentRunError):
    code = "agent_not_found"
    remediation = "Install the agent so its command is on PATH, or give its executable with --agent-bin PATH."


class PullError(MlxAgentError):
    """Fetching a model from the Hub (``mlx-agent pull``): the one command that uses the network."""


class HubUnreachable(PullError):
    code = "hub_unreachable"
    remediation = "Check the network and HF_ENDPOINT (a pull needs HF_HUB_OFFLINE unset), then run the command again."


class RepoNotFound(PullError):
    code = "repo_not_found"
    remediation = (
        "Check ORG/NAME and --revision on the Hub; for a gated or private repo, log in (hf auth login) or set HF_TOKEN."
    )


class NotEnoughDisk(PullError):
    code = "not_enough_disk"
    remediation = (
        "Free space on the disk of the Hugging Face cache (or point HF_HOME at a larger one) and run the command "
        "again; the files already fetched are kept."
    )


class DownloadInterrupted(PullError):
    code = "download_interrupted"
    remediation = (
        "Run the same --confirm again: the files already fetched are kept and the partial one resumes where it stopped."
    )


class DownloadCorrupt(PullError):
    code = "download_corrupt"
    remediation = (
        "The bad bytes were deleted; run the same --confirm again, and if it repeats, the Hub's copy or a proxy "
        "between is at fault."
    )


class RequestRefused(MlxAgentError):
    """An HTTP request the front (or a worker) answers with an error object: status, type, code and param.

    Its ``code`` is per instance (``model_not_found``, ``invalid_value``, ...), documented in docs/gateway.md
    and docs/wrapped-server.md; ``headers`` and ``extra`` ride along into the answer.
    """

    code = "request_refused"
    remediation = "Change the request as error.message and error.param say; docs/gateway.md lists every code."

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.type_ = type_
        self.param = param
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """Return the OpenAI-style error document ``{"error": {"message", "type", "param", "code", ...}}``."""
        from mlx_agent.api_errors import Family, error_body

        return error_body(
            Family.OPENAI, self.code, self.message, status=self.status, type_=self.type_, param=self.param, **self.extra
        )


class SeamChanged(MlxAgentError):
    code = "seam_changed"
    remediation = (
        "Install the mlx-lm version range mlx-agent pins (see pyproject.toml); the installed one no "
        "longer has a name the wrapper uses."
    )


class OwnershipMismatch(MlxAgentError):
    code = "ownership_mismatch"
    remediation = (
        "The receipt's pid now belongs to another process; nothing was signalled. "
        "Delete the stale receipt after checking the port yourself."
    )


class LockTimeout(MlxAgentError):
    code = "lock_timeout"
    remediation = "Another mlx-agent command is working on this port; retry when it has finished."


class HttpError(BaseException):
    """An error answer that must reach the worker's handler through mlx_lm's ``except Exception`` blocks.

    mlx_lm's handler catches every ``Exception`` raised while it starts a generation and answers 404 with the
    message. Deriving from ``BaseException`` lets this pass those blocks untouched; only the wrapped handler
    catches it. Never raise it in the generation thread: that thread only survives ``Exception``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """Return the OpenAI-style error document."""
        from mlx_agent.api_errors import Family, error_body

        return error_body(Family.OPENAI, self.code, self.message, status=self.status, type_=self.type, param=self.param)


class ClientGone(BaseException):
    """The worker's client closed its connection; the reply was stopped and nothing more is written.

    A ``BaseException`` so that it leaves mlx_lm's handler code untouched by its ``except Exception`` blocks.
    """


class BodyInvalid(Exception):
    """A request body refused by its endpoint's declaration (``bodies.py``): a 400 naming the field."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class TemplateFailed(Exception):
    """The chat template (or the prompt around it) could not be built for this request.

    Raised in the generation thread, which mlx_lm keeps alive for ``Exception`` subclasses, and carried back
    to the handler on the request's queue.
    """


class SchemaFailed(Exception):
    """llguidance could not build the schema's matcher for this model's tokenizer (generation thread)."""


class ContextLengthExceeded(Exception):
    """The rendered prompt leaves no room in the model's context for a reply (generation thread)."""


class EmptyPrompt(Exception):
    """The prompt rendered to no token (an empty completion prompt, no BOS): mlx_lm's batch would die on it."""

    def __init__(self, param: str) -> None:
        super().__init__("The prompt is empty once tokenized, so there is nothing to continue; send some text.")
        self.param = param
