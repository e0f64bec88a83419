"""Model runners shared by both processes: a model, its static KV cache and passes at explicit slots.

Every runner implements models.runner.ModelRunner; the target and drafter loops build a pass's arrays, the runner
only executes them. Importing this package changes nothing outside it (no environment variables, thread counts)."""
