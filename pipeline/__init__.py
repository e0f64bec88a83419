"""Pure rules of pipelined speculative decoding: pool, selection, tree, verification, rounds.

Nothing here opens a socket, starts a process or picks a device; every rule runs on plain arrays and
tensors, so the tests exercise it without models.
"""
