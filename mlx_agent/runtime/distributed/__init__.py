"""One model served by a group of ranks (mlx.launch): the rank's loop and our supervised launcher."""
