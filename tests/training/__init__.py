"""Tests of the head training program (training/)."""

from training import cli


def killed_after(steps: int):
    """training.cli.train as a kill after `steps` optimizer steps leaves it: a KeyboardInterrupt once the
    checkpoint of that step is written (the runs here save every step)."""
    real = cli.train

    def killed(*args, **kw):
        def stop(done, total, row):
            if done == steps:
                raise KeyboardInterrupt
        return real(*args[:-1], stop, **kw)

    return killed
