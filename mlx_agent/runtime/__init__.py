"""Code that runs inside the launched server process; the only package that imports mlx.

``python -m mlx_agent.runtime RUNTIME ...`` starts a worker (``entry.py`` picks the runtime's entry). Families:
``entries/`` (each runtime's start and its checks), ``serving/`` (the wrapped mlx_lm request path), ``reply/``
(watching a reply as it is generated), ``accel/`` (prompt lookup, the M5 prefill kernel, ``kernels/``) and
``distributed/`` (a group of ranks and its launcher).
"""
