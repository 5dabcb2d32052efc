"""``python -m mlx_agent.gateway --config /abs/front.json``: run a server's front until SIGTERM.

Exit status: 0 after a clean stop, 1 when the confirm that started it ended before recording it, 2 for an
unusable config, token, key file or policy, 3 (with a refusal line) when it cannot listen (``port_in_use``),
its socket directory is unsafe (``state_dir_unsafe``), the links from its argv[0] no longer lead to the
interpreter it runs (``runtime_changed``: started by the reviewed file after a link was swapped, as a unit's
restart is) or an eager front cannot load one of its models.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Parse the command line, read the config, serve."""
    parser = argparse.ArgumentParser(prog="python -m mlx_agent.gateway", description=__doc__)
    parser.add_argument("--config", required=True, help="absolute path of the front's config (JSON, 0600)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s mlx-agent front: %(message)s"
    )

    from mlx_agent.spawn import await_word

    if not await_word():  # started at confirm: nothing before its receipt exists, and nothing if it never will
        print("mlx-agent front: its supervisor ended before recording it; not starting", file=sys.stderr)
        return 1
    from mlx_agent.errors import MlxAgentError, print_refusal
    from mlx_agent.spawn import refuse_if_interpreter_moved
    from mlx_agent.wire import EXIT_REFUSED

    try:
        refuse_if_interpreter_moved()  # a link swapped since review: the swapped-in file is never what runs
    except MlxAgentError as exc:
        print_refusal(exc)
        return EXIT_REFUSED
    from mlx_agent.errors import FrontConfigInvalid
    from mlx_agent.gateway.door.app import read_secrets, serve
    from mlx_agent.gateway.door.config import load_config

    try:
        config = load_config(Path(args.config))
        secrets = read_secrets(config)
    except FrontConfigInvalid as exc:
        print(f"mlx-agent front: {exc.message}", file=sys.stderr)
        return 2
    # uvloop's event loop halves the front's CPU per streamed event, which the worker's own decode shares.
    import uvloop

    try:
        return uvloop.run(serve(config, secrets))
    except MlxAgentError as exc:  # a refusal before it listens (an unsafe socket directory): its supervisor says so
        print_refusal(exc)
        return EXIT_REFUSED


if __name__ == "__main__":
    from mlx_agent.exiting import exit_without_teardown

    exit_without_teardown(main(sys.argv[1:]))
