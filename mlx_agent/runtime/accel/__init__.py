"""The two accelerations, ``--prompt-lookup`` and ``--m5-prefill``, with their kernels and support file."""
