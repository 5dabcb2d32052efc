"""The errors only the commands raise: planning, supervising, wiring, training, pulling (``mlx_agent.errors``'s tree).

They are part of the one exception tree (each subclasses a class of ``mlx_agent.errors``, which lists the whole
tree); they live apart because no server process raises them. A front and a worker bind, by sha256, the modules
they run, ``mlx_agent/errors/__init__.py`` among them: a new error of a command here leaves every reviewed
server's plan as it was.
"""

from __future__ import annotations

from mlx_agent.errors import (
    GatewayError,
    LaunchError,
    MlxAgentError,
    PortError,
    PreviewError,
    ReceiptError,
    RuntimeSelectionError,
    SourceError,
    UsageError,
)


class ModelsFileInvalid(UsageError):
    code = "models_file_invalid"
    remediation = "Fix the models file at the line and key named in details; each [[model]] takes serve start's keys."


class ModelsNameConflict(UsageError):
    code = "models_name_conflict"
    remediation = "Give every model a name and aliases of its own, so a request's model reaches one model only."


class PreviewHashRequired(PreviewError):
    code = "preview_hash_required"
    remediation = "Run the same command without --confirm, review the plan, then pass its --preview-hash."


class ModelNotLocal(SourceError):
    code = "model_not_local"
    remediation = (
        "Fetch it with mlx-agent pull ORG/NAME (serving never downloads), or pass --path with an "
        "absolute local model directory."
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


class RingPortInUse(PortError):
    code = "ring_port_in_use"
    remediation = (
        "Choose another --ring-port (the group takes one port per host and IP from it), or leave --ring-port out "
        "and confirm picks a free run."
    )


class PortClaimed(PortError):
    code = "port_claimed"
    remediation = "Choose another --port; a wired config expects a different server on this one."


class LaunchInterrupted(LaunchError):
    code = "launch_interrupted"
    remediation = "The launch was interrupted and the server stopped; run the confirm step again."


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


class OwnershipMismatch(MlxAgentError):
    code = "ownership_mismatch"
    remediation = (
        "The receipt's pid now belongs to another process; nothing was signalled. "
        "Delete the stale receipt after checking the port yourself."
    )


class LockTimeout(MlxAgentError):
    code = "lock_timeout"
    remediation = "Another mlx-agent command is working on this port; retry when it has finished."
