"""The offline study of recorded rounds (`python -m timing values`): every selection rule valued at the shared
contexts of the rounds a sweep recorded, coverage and stopping rules, the retained rows; the paper's tables
beside its figures, and their plots. It reads evaluation's rounds files (and the records beside them) and times
nothing."""
