"""What crosses a process boundary, in one place below everything (standard library only, no imports at all).

The CLI plans and supervises, the front (``mlx_agent.gateway``) serves, and the worker (``mlx_agent.runtime``)
generates; they are separate processes that agree on what is written here: the format versions of the files
they hand each other, the wrapped entry's own argv flags, the refusal line a child prints before it exits,
the control path, the environment every child gets, and the limits of a request body.
"""

# Format versions: readers refuse an unknown major version and read older minors.
ENVELOPE_VERSION = "1.0"  # the CLI's --json envelope
PLAN_VERSION = "3.4"  # serve plans and the serve receipts that embed them (3.4: each model's prefix_cache,
# mlx-vlm's APC; 3.3: mlx-vlm's start-up options:
# thinking_budget, max_kv_size, vision_cache_size, kv_cache's kv_quant_scheme, draft's draft_kind; 3.2: each
# model's reply_limits and decode_concurrency; 3.1: each model's agents record; 3.0:
# the seed's decode_profile and prefill_kernel names again, max_tokens null when --max-tokens is not given; 2.0:
# every server has a front)
TRAINING_VERSION = "1.0"  # lora train plans and receipts
PULL_VERSION = "1.0"  # pull plans and receipts
FRONT_CONFIG_VERSION = "2.1"  # the config file the front reads (2.1: each model's prefix_cache)
FRONT_STATE_VERSION = "2.2"  # the front's control status document (2.1: each model's caches; 2.2: its kind)
POLICY_FILE_VERSION = "2.0"  # the policy the front persists after `serve policy`
RECIPE_VERSION = "1.0"  # runtime recipes

# Every process mlx-agent starts gets these: nothing is ever downloaded at run time.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
HOST = "127.0.0.1"

# A child that refuses to start prints one line ``REFUSAL_PREFIX + {"code", "message", "details"}`` on stderr
# (the code is an mlx-agent error code) and exits with EXIT_REFUSED; its supervisor raises the same error.
REFUSAL_PREFIX = "mlx-agent-error "
EXIT_REFUSED = 3
# A worker whose generation thread died exits with this, so its front notices and starts a new one.
EXIT_GENERATION_DIED = 70

# The front's control endpoints live under this prefix, which no OpenAI- or Anthropic-style path uses.
CONTROL_PREFIX = "/mlx-agent/"

# The largest request body the front reads (413 beyond it).
MAX_BODY_BYTES = 16 * 1024 * 1024
# The front's connection limits (the plan records them): open at once, seconds for a request's headers, and
# seconds an idle keep-alive connection stays open.
MAX_CONNECTIONS = 512
HEADER_TIMEOUT_S = 30.0
KEEPALIVE_TIMEOUT_S = 60.0
# How long a request's body may take once its headers are in, and the least average rate (bytes/s) it must keep
# once a grace has passed (a body of a few kB is never cut): past either the front answers 408 and closes.
BODY_TIMEOUT_S = 60.0
BODY_MIN_RATE = 1024.0
BODY_GRACE_S = 5.0
# Per model: how many requests may wait for a worker (a cold load, a busy one) before the next is refused 503
# queue_full, and how long a model with requests running may go without a byte from its worker before it is
# wedged and its worker replaced (the plan records both: --max-queue, --stall-timeout).
MAX_QUEUE = 64
STALL_TIMEOUT_S = 120.0

# Our worker's reply header giving the reply limit it applied when the room the prompt leaves in the context
# cut the ``max_tokens`` it was sent; the front tells the client (``gateway.observe.limit_notice``).
GRANTED_MAX_TOKENS_HEADER = "x-mlx-agent-granted-max-tokens"
# A worker's reply lists here, in its message (or a stream chunk's delta), each tool call no parser could read
# (``{"text", "error"}``); the front counts them (``mlx_agent_unparsed_tool_calls_total``).
UNPARSED_TOOL_CALLS = "unparsed_tool_calls"

# The wrapped entry: what the plan fixes for it crosses as one record (``worker_contract``); what its front fills
# in at each load stays a flag of its own, taken out of argv with the contract before the runtime parses the rest.
ENTRY_MODULE = "mlx_agent.runtime"
FRONT_MODULE = "mlx_agent.gateway"
SOCKET_FLAG = "--mlx-agent-socket"  # the Unix socket a worker behind the front listens on
# Beside the workers' sockets, in the front's private socket directory: one directory per image-edit request
# ("edit-*"), where the front writes the images it checked and the edit worker reads them (mlx-vlm takes an edit's
# images as paths). A worker may open an image path only under it.
UPLOADS_DIR = "uploads"
# The reply limits a request naming none gets, where the model's plan sets none (0: no limit; runtime/serving/limits).
REASONING_BUDGET = 0
HEDGE_LIMIT = 12
REPEAT_LIMIT = 3
# Serving one model from a group of ranks (docs/distributed.md). The plan runs the entry under this launcher
# (mlx.launch with a quiet forwarder and an honest exit status), and gives every rank the base model's reviewed
# files (the contract's ``model_checks``), which each rank rechecks in its own copy before it loads.
LAUNCH_MODULE = "mlx_agent.runtime.distributed.launcher"
EXIT_MODEL_CHANGED = 65  # a rank's copy of the model is not what was reviewed (refusal line model_changed)
EXIT_RANK_LOST = 75  # a rank lost its group: a peer or its launcher went away
# A ring group planned without --ring-port has this in its launcher argv; confirm puts the first port it chose.
RING_PORT_PLACEHOLDER = "{ring_port}"
# Our launcher sets this in every rank's environment and writes the launch's secret (hex) as the first line of each
# rank's stdin; the rank proves it to its peers before any model data crosses the ring (docs/distributed.md).
RING_AUTH_ENV = "MLX_AGENT_RING_AUTH"
# A native worker (``runtime/entries/native_entry.py``, run by path under an interpreter without this package)
# reads its port and its front's per-launch key from these variables; that file spells them itself (a test
# checks they agree).
PORT_ENV = "MLX_AGENT_WORKER_PORT"
KEY_ENV = "MLX_AGENT_WORKER_KEY"
# The file a worker behind the front writes its load and prefill progress to (a JSON document, replaced whole).
PROGRESS_ENV = "MLX_AGENT_PROGRESS_FILE"
# Placeholders in a worker's argv template that the front fills in per load.
SOCKET_PLACEHOLDER = "{socket}"
PORT_PLACEHOLDER = "{port}"

# The name a front gives the worker for its one model; the worker serves nothing else.
WORKER_MODEL_NAME = "default_model"


# A front proves it is the one a receipt launched: ``GET /health?challenge=C`` answers ``"proof"``, an HMAC of C
# keyed by its private control token (never sent). A squatter on the port cannot answer it.
CHALLENGE_PARAM = "challenge"
MAX_CHALLENGE = 128


def front_proof(token: str, challenge: str) -> str:
    """Return the proof a front gives for ``challenge``: HMAC-SHA256 of it under the control token."""
    import hmac

    return hmac.new(token.encode(), b"mlx-agent front proof " + challenge.encode(), "sha256").hexdigest()


# A wrapped worker keeps its prompt cache across unloads: it restores the entries saved in this directory (named
# by the model's reviewed identity) before it serves, and saves its own there when TERM ends it, then keeps
# every saved entry of the home within the byte limit (least recently used first out).
PROMPT_CACHE_FLAG = "--mlx-agent-prompt-cache"
PROMPT_CACHE_PLACEHOLDER = "{prompt_cache}"  # the front puts the model's directory here at each spawn
PROMPT_CACHE_QUARANTINE = "quarantine"  # beside a model's kept entries: those the worker refused to restore
PROMPT_CACHE_REPORT = "last-save.json"  # beside them too: what the last save did (saved, skipped, failed)
