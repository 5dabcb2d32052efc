"""The wrapped mlx_lm server's request path: handler, generator, request checks, limits, cancellation, errors."""
