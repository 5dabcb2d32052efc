"""``python -m mlx_agent.gateway --config /abs/gateway.json``: run the JIT gateway until SIGTERM.

Exit status: 0 after a clean stop, 1 if it cannot listen, 2 for an unusable config, token, key file or policy.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Parse the command line, read the config, serve."""
    parser = argparse.ArgumentParser(prog="python -m mlx_agent.gateway", description=__doc__)
    parser.add_argument("--config", required=True, help="absolute path of the gateway config (JSON, 0600)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s mlx-agent gateway: %(message)s")

    from mlx_agent.gateway.app import read_secrets, serve
    from mlx_agent.gateway.config import ConfigError, load_config

    try:
        config = load_config(Path(args.config))
        secrets = read_secrets(config)
    except ConfigError as exc:
        print(f"mlx-agent gateway: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(config, secrets))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
