"""Code that runs inside the launched server process; the only package that imports mlx."""
