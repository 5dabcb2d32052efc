"""mlx-agent: reviewed plans for local MLX model servers."""

__version__ = "0.2.0"
