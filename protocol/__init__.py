"""Wire protocol between the target and drafter processes: typed messages, one codec, a ZeroMQ channel."""
