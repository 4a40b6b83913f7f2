"""What a framework whose step is traced functions (TensorFlow's) records of them for counting
(harness.rank.tf_work): no framework imported here."""
from __future__ import annotations


class TracedCalls:
    """A TensorFlow adapter's record of the traced functions its counted step calls: only while a
    step is counted (:attr:`calls` is None otherwise), so that a timed step does nothing more."""

    calls: list | None = None

    def traced(self, phase: str, function, *args):
        if self.calls is not None:
            self.calls.append((phase, function, args))
        return function(*args)
