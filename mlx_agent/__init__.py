"""mlx-agent: reviewed plans for local MLX model servers."""

__version__ = "0.1.0"
FORMAT_VERSION = "1.0"
