"""Pure rules of pipelined speculative decoding: pool, the table of rules and their selection, tree,
verification, the round loop, budget auto's choice and the field's metrics.

Nothing here opens a socket, starts a process or picks a device; every rule runs on plain arrays and
tensors, so the tests exercise it without models."""
