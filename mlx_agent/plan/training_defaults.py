"""Defaults of a training plan, kept import-free so the command line can show them cheaply.

Every value here is written into the plan explicitly, so a change of mlx_lm's own defaults never changes
what a reviewed plan trains.
"""

FINE_TUNE_TYPES = ("lora", "dora")
DEFAULT_ITERS = 100
DEFAULT_BATCH_SIZE = 4
DEFAULT_LEARNING_RATE = 1e-5
DEFAULT_NUM_LAYERS = 16
DEFAULT_RANK = 8
DEFAULT_SCALE = 20.0
DEFAULT_DROPOUT = 0.0
DEFAULT_FINE_TUNE_TYPE = "lora"
DEFAULT_MAX_SEQ_LENGTH = 2048
DEFAULT_SEED = 0
DEFAULT_STEPS_PER_REPORT = 10
DEFAULT_STEPS_PER_EVAL = 200
DEFAULT_VAL_BATCHES = 25
DEFAULT_SAVE_EVERY = 100
