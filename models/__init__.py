"""Model runners shared by both processes: a model, its static KV cache and passes at explicit slots.

Every runner (the transformers one and the mock one) implements models.runner.ModelRunner: its `forward`
takes tokens at given positions, K/V written to given cache slots, each row attending to the slots
[0, prefix) and to the columns `cols` that its `vis` row marks. The target and drafter loops build those
arrays; the runner only executes them.
Importing this package changes nothing outside it (no environment variables, no thread counts).
"""
