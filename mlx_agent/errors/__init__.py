"""The one exception tree of mlx-agent.

Every failure a user can cause or meet is a leaf below, with a stable snake_case ``code``, an
``exit_code`` (1 refused or failed, 2 usage error) and a one-sentence ``remediation``. The CLI turns
them into the JSON envelope at its boundary only; anything else reaching it is a bug.

This module holds the root, the errors a server process (a front or a worker) can raise, and the classes they
derive from; the errors only the commands raise (planning, supervising, wiring, training, pulling) are in
``errors/commands.py``. Fronts and workers bind the modules they run by sha256, and this one is among them, so
a command's new error goes there and leaves every reviewed plan as it was.

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


class PreviewError(MlxAgentError):
    """The confirm step does not match a reviewed preview."""


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


class ModelInvalid(SourceError):
    code = "model_invalid"
    remediation = "Point --path at a model directory holding config.json, tokenizer files and weights."


class PortError(MlxAgentError):
    """The port cannot be used for this server."""


class PortInUse(PortError):
    code = "port_in_use"
    remediation = "Stop what listens there (`mlx-agent serve stop --port N` if it is ours) or choose another --port."


class LaunchError(MlxAgentError):
    """The server process did not become ready; nothing was left running."""


class LaunchFailed(LaunchError):
    code = "launch_failed"
    remediation = "Read the log lines in details.log_tail (the full log is at details.log_path) and fix the cause."


class ReadinessTimeout(LaunchError):
    code = "readiness_timeout"
    remediation = "Raise --ready-timeout for large models, or read details.log_tail for why loading stalled."


class RingPeerUnverified(LaunchError):
    code = "ring_peer_unverified"
    remediation = (
        "A process that is not one of the group's ranks took one of its links (details name the link); nothing was "
        "sent to it and every rank stopped. Find who listens or connects there (details.pid, details.uid), then "
        "confirm again."
    )


class ReceiptError(MlxAgentError):
    """A receipt is missing or unreadable."""


class StateDirUnsafe(ReceiptError):
    code = "state_dir_unsafe"
    remediation = (
        "Use a state directory (MLX_AGENT_HOME, --receipts-dir) that you own and that group and others cannot "
        "write (chmod 700), holding regular files of yours, not links."
    )


class StateWriteFailed(ReceiptError):
    code = "state_write_failed"
    remediation = "Free space on (or fix the permissions of) the file system named in details.path, then run it again."


class GatewayError(MlxAgentError):
    """A control request to a server's front could not be made or was refused."""


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


class DraftModelMismatch(SourceError):
    code = "draft_model_mismatch"
    remediation = (
        "Give --draft-model a smaller model with the served model's tokenizer vocabulary (the same family), "
        "or leave it out."
    )


class RuntimeSelectionError(MlxAgentError):
    """The requested runtime cannot run here."""


class UnsupportedModel(RuntimeSelectionError):
    code = "unsupported_model"
    remediation = "Serve a model whose model_type the installed mlx-lm or mlx-vlm supports, or upgrade them yourself."


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
