from mlx_agent.cli import main

main()
