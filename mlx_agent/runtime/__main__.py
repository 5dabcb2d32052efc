import sys

from mlx_agent.exiting import exit_without_teardown
from mlx_agent.runtime.entry import main

exit_without_teardown(main(sys.argv[1:]))  # a worker's stop is not kept waiting on freeing every module
