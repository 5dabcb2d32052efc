import sys

from mlx_agent.runtime.entry import main

sys.exit(main(sys.argv[1:]))
