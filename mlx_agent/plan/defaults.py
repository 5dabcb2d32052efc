"""Defaults of a serve plan, kept import-free so the command line can show them cheaply."""

HOST = "127.0.0.1"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
DEFAULT_MAX_TOKENS = 512
DEFAULT_READY_TIMEOUT = 120.0
