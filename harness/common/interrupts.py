"""Ctrl-C and SIGTERM for a whole session, wherever they land.

1st press (or the batch system's SIGTERM): the running cell is ended gracefully (SIGTERM to its
    launcher, then SIGKILL and the token sweep) and every finished cell's results, history rows
    and baselines are kept; the session exits with pytest's INTERRUPTED status (2).
2nd press: hurry. The running cell's processes are SIGKILLed at once and the report and plots are
    skipped; files are still written whole, and the exit status is still 2.
3rd press: exit at once (status 2) after killing the running cell, except in the middle of
    writing a file, which is finished first.

Only the first press ever raises ``KeyboardInterrupt``, and only where raising is safe: while a
launch is being waited for, or outside dlscale's own code. Inside a :meth:`Interrupts.protect`
section (starting a launch, ending it, judging and recording a cell, the end of the session) it is
kept pending and raised at the section's end or at the next :meth:`Interrupts.pause`. Later
presses never raise: pytest does not survive a ``KeyboardInterrupt`` raised while it handles the
first one (pytest issue 4517 is a close relative).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator

INTERRUPTED_EXIT_STATUS = 2
"""pytest's ``ExitCode.INTERRUPTED``."""

SIGNALS = (signal.SIGINT, signal.SIGTERM)

FIRST_NOTICE = ("dlscale: interrupted ({signal}): ending the running cell and keeping every finished cell's "
                "results, history and baselines. Ctrl-C again to hurry (kill the cell at once, skip the report "
                "and plots); a third time to exit at once.")
HURRY_NOTICE = "dlscale: hurrying ({signal}): killing the running cell at once; the report and plots are skipped."
EXIT_NOTICE = "dlscale: exiting at once ({signal})."


class Interrupts:
    """The process's one signal controller; see the module docstring for what each press does.

    ``install`` makes it the handler of SIGINT and SIGTERM for the rest of the process (the pytest
    plugin does, for sessions that run cells). Without it, each outermost :meth:`protect` section
    installs it for its own duration, so that a script calling :func:`harness.launch.runner.run_cell`
    gets the same clean-up guarantees."""

    def __init__(self) -> None:
        self._installed = False
        self._reset()

    def _reset(self) -> None:
        self.presses = 0
        self.signal_name = ""
        self.finishing = False
        """Set once the cells are over: no press raises any more, the session's end completes."""
        self._depth = 0
        self._pending = False
        self._writing = 0
        self._exit_after_write = False
        self._hurry_actions: dict[int, Callable[[], None]] = {}
        self._notice_fd: int | None = None

    # -- state -----------------------------------------------------------------------------------
    @property
    def interrupted(self) -> bool:
        return self.presses >= 1

    @property
    def hurry(self) -> bool:
        return self.presses >= 2

    def install(self, notice_fd: int | None = None) -> None:
        """Handle SIGINT and SIGTERM from now on (main thread only); notices go to ``notice_fd``
        (default: standard error), which should bypass any output capture."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._reset()  # a new session (pytester runs several in one process) starts unpressed
        self._notice_fd = notice_fd
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)
        self._installed = True

    def session_over(self) -> None:
        """For the last moments of a session whose files are written and whose exit status is set:
        further presses are ignored. In the interpreter's shutdown Python puts the default action
        back, and a press landing there would kill the process by SIGINT (status 130)."""
        if self._installed and threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        self._notice_fd = None

    # -- sections --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def protect(self, *, raise_pending: bool = True) -> Iterator[None]:
        """A section a first press must not cut: the press is kept pending and raised as
        ``KeyboardInterrupt`` at the end of the outermost section (``raise_pending``) or at the
        next :meth:`pause`. Never raises while an exception is already on its way."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        temporary = not self._installed and self._depth == 0
        previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS} if temporary else {}
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if temporary:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                pending, self._pending, self.presses = self._pending, False, 0
        if temporary:
            if pending and sys.exc_info()[0] is None:
                raise KeyboardInterrupt(self.signal_name)
        elif raise_pending:
            self._raise_pending()

    def pause(self, seconds: float, until: Callable[[], bool] | None = None) -> None:
        """Sleep with the protection lifted: the one place inside a protected section where a first
        press (now, or one kept pending) ends what the section was waiting for. ``until``: a cheap
        check that ends the sleep early once true (looked at every :data:`WAKE_S`)."""
        if threading.current_thread() is not threading.main_thread():
            _sleep(seconds, until)  # signals reach the main thread only
            return
        depth, self._depth = self._depth, 0
        try:
            self._raise_pending()
            _sleep(seconds, until)
        finally:
            self._depth = depth

    @contextlib.contextmanager
    def on_hurry(self, action: Callable[[], None]) -> Iterator[None]:
        """Run ``action`` (e.g. SIGKILL a launch) at once if a second press arrives meanwhile."""
        key = id(action)
        self._hurry_actions[key] = action
        try:
            yield
        finally:
            self._hurry_actions.pop(key, None)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A file being written: a third press waits for it to be whole before the process exits."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if self._exit_after_write and not self._writing:
                os._exit(INTERRUPTED_EXIT_STATUS)

    # -- the handler -------------------------------------------------------------------------------
    def _raise_pending(self) -> None:
        if self._pending and not self._depth and not self.finishing:
            self._pending = False
            raise KeyboardInterrupt(self.signal_name)

    def _on_signal(self, signum: int, frame) -> None:
        self.presses += 1
        self.signal_name = signal.Signals(signum).name
        if self.presses == 1:
            self.say(FIRST_NOTICE.format(signal=self.signal_name))
            self._pending = True
            self._raise_pending()
            return
        if self.presses == 2:
            self.say(HURRY_NOTICE.format(signal=self.signal_name))
            self._run_hurry_actions()
            return
        self.say(EXIT_NOTICE.format(signal=self.signal_name))
        self._run_hurry_actions()
        if self._writing:
            self._exit_after_write = True
        else:
            os._exit(INTERRUPTED_EXIT_STATUS)

    def _run_hurry_actions(self) -> None:
        for action in list(self._hurry_actions.values()):
            try:
                action()
            except Exception as error:  # a signal handler must not raise: say it and go on
                self.say(f"dlscale: while killing the running cell: {error!r}")

    def say(self, line: str) -> None:
        """One line straight to the terminal: a signal handler must not enter a buffered stream
        that the interrupted code may be writing to."""
        try:
            os.write(self._notice_fd if self._notice_fd is not None else 2, (line + "\n").encode())
        except OSError:
            pass


INTERRUPTS = Interrupts()


WAKE_S = 0.02
"""How often :meth:`Interrupts.pause` looks at its ``until``: a launch that ended is noticed within
this, not within the runner's half-second round of reading progress files."""


def _sleep(seconds: float, until: Callable[[], bool] | None) -> None:
    if until is None:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while not until() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(WAKE_S, left))
