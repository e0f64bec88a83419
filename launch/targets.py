"""The target as the Python API talks to it: in the caller's process (a TargetSession), or in a process of its own
answering JSON lines (programs.target_program's --serve). Either gives a request's answer lines: the records of
its turns and, when it streams, the tokens each round commits. A request left before its end is cancelled: the
target process is told to stop it at its next round, and what it still sends for it is dropped."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Iterator

from pipeline.config import InputError


class StreamLeft(Exception):
    """Raised in a streamed decode whose reader stopped reading: the decode stops at its next round."""


class InProcessTarget:
    """A TargetSession in this process."""

    def __init__(self, session) -> None:
        self.session = session

    def lines(self, request: dict) -> Iterator[dict]:
        from programs.target_program import request_records

        if request.get("stream"):
            yield from self._streamed(request)
        else:
            yield from (record.to_json() for record in request_records(self.session, request))  # as the wire has them

    def timings(self, caps: list[int]) -> None:
        """Budget auto's pass timings at `caps` ready (programs.target_program.time_passes)."""
        from programs.target_program import time_passes

        time_passes(self.session, caps)

    def _streamed(self, request: dict) -> Iterator[dict]:
        """The decode runs on a worker thread; its rounds' tokens reach the caller through a queue; a caller
        that stops reading stops the decode at its next round."""
        from programs.target_program import request_records

        chunks: queue.Queue = queue.Queue()
        stopped = threading.Event()

        def on_text(chunk: dict) -> None:
            if stopped.is_set():
                raise StreamLeft
            chunks.put({"kind": "tokens", **chunk})

        def work() -> None:
            try:
                for record in request_records(self.session, request, on_text):
                    chunks.put(record.to_json())
                chunks.put(None)
            except BaseException as e:  # handed to the caller's thread, which raises it
                chunks.put(e)

        worker = threading.Thread(target=work, name="specpair-stream", daemon=True)
        worker.start()
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stopped.set()
            worker.join()


class ProcessTarget:
    """A target process answering numbered JSON requests on its stdin with numbered lines on its stdout."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.sent = 0  # the number of the last request sent

    def ready(self) -> dict:
        """The ready line's models (the target loaded, connected and shook hands)."""
        return self._answer(None)["models"]

    def lines(self, request: dict) -> Iterator[dict]:
        """One request -> its answer lines up to its "done"; a request left before then is cancelled."""
        self.sent += 1
        number = self.sent
        self._write({"request": number, **request})
        ended = False
        try:
            while (line := self._answer(number))["kind"] != "done":
                yield line
            ended = True
        finally:
            if not ended:
                self.cancel(number)

    def timings(self, caps: list[int]) -> None:
        """Budget auto's pass timings at `caps` ready in the target process (its serve's {"timings"} request)."""
        for _ in self.lines({"timings": caps}):
            pass

    def cancel(self, number: int) -> None:
        """Tell the target to stop request `number` (and any before it) at its next round."""
        try:
            self._write({"cancel": number})
        except (BrokenPipeError, ValueError):  # the target has gone (or its pipe is closed): nothing runs on
            pass

    def _write(self, line: dict) -> None:
        self.proc.stdin.write(json.dumps(line) + "\n")
        self.proc.stdin.flush()

    def _answer(self, request: int | None) -> dict:
        """The next line answering `request` (None: the ready line), without its number; lines of earlier
        requests (one interrupted or left) are dropped; an error line raised as InputError or RuntimeError."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the target process exited with status {self.proc.wait()}; see its log above")
            answer = json.loads(line)
            if answer.pop("request", None) == request:
                break
        if answer["kind"] == "error":
            raise (InputError if answer["input"] else RuntimeError)(answer["message"])
        return answer
