"""Model runners shared by both processes: a model, its static KV cache and passes at explicit slots.

Every runner (the transformers one and the mock one) has the same `forward`: tokens at given positions,
K/V written to given cache slots, each row attending to the slots [0, prefix) and to the columns `cols`
that its `vis` row marks. The target and drafter loops build those arrays; the runner only executes them.
"""

import os

# Models load from local files only: a missing model must fail at once with a clear message, never wait
# on a network that may not be there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

PREFILL_CHUNK = 512  # committed tokens per pass when prefilling; bounds a pass's (tokens, context) mask
