"""The Ctrl-C controller's rules, press by press, without launching anything. Signals are raised in
this process (``signal.raise_signal`` runs the handler before the next statement); each test puts
the test session's own handlers back."""
import json
import signal
import subprocess
import sys
import textwrap

import pytest

from harness.common.interrupts import INTERRUPTED_EXIT_STATUS, SIGNALS, Interrupts


@pytest.fixture
def controller():
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    yield Interrupts()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def installed(controller: Interrupts) -> Interrupts:
    controller.install(notice_fd=None)
    return controller


def test_a_first_press_outside_any_section_raises_at_once(controller):
    installed(controller)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert controller.interrupted and not controller.hurry


def test_sigterm_is_a_press_too(controller):
    installed(controller)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)


def test_a_first_press_in_a_protected_section_is_raised_at_its_end(controller):
    installed(controller)
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with controller.protect():
            signal.raise_signal(signal.SIGINT)
            reached.append("the rest of the section")
    assert reached == ["the rest of the section"]


def test_a_pending_press_is_raised_by_the_next_pause_not_by_the_sections_end(controller):
    installed(controller)
    steps = []
    with controller.protect(raise_pending=False):
        signal.raise_signal(signal.SIGINT)
        steps.append("after the press")
    steps.append("after the section")
    with pytest.raises(KeyboardInterrupt):
        controller.pause(0)
    assert steps == ["after the press", "after the section"]


def test_a_press_during_a_pause_inside_a_protected_section_raises(controller):
    installed(controller)
    with pytest.raises(KeyboardInterrupt):
        with controller.protect(raise_pending=False):
            controller.pause(0)
            signal.raise_signal(signal.SIGINT)  # lands protected: pending
            controller.pause(0)


def test_later_presses_never_raise_and_hurry_runs_the_kill_actions(controller):
    installed(controller)
    killed = []
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    with controller.on_hurry(lambda: killed.append("launch")):
        signal.raise_signal(signal.SIGINT)  # no exception here
    assert controller.hurry and killed == ["launch"]
    with controller.on_hurry(lambda: killed.append("other")):
        pass
    assert killed == ["launch"], "an action is run only while it is registered"


def test_no_press_raises_once_the_session_is_finishing(controller):
    installed(controller)
    controller.finishing = True
    signal.raise_signal(signal.SIGINT)
    with controller.protect():
        pass
    controller.pause(0)
    assert controller.interrupted


def test_a_failing_kill_action_is_reported_not_raised(controller, capfd):
    installed(controller)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)

    def broken():
        raise ProcessLookupError("gone")

    with controller.on_hurry(broken):
        signal.raise_signal(signal.SIGINT)
    assert "while killing the running cell" in capfd.readouterr().err


def test_without_install_a_protected_section_handles_presses_for_its_duration(controller):
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with controller.protect(raise_pending=False):
            assert signal.getsignal(signal.SIGINT) != before
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == before
    assert controller.presses == 0, "a temporary section leaves no press behind for the next one"


def test_without_install_a_section_inside_an_except_block_does_not_raise_a_second_exception(controller):
    with pytest.raises(ValueError):
        try:
            raise ValueError("the first problem")
        except ValueError:
            with controller.protect():
                signal.raise_signal(signal.SIGINT)
            raise


THIRD_PRESS = """
import json, signal, sys
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import write_json_atomic

INTERRUPTS.install()
try:
    signal.raise_signal(signal.SIGINT)
except KeyboardInterrupt:
    pass
signal.raise_signal(signal.SIGINT)
with INTERRUPTS.writing():
    signal.raise_signal(signal.SIGINT)  # the third: waits for the file
    write_json_atomic(sys.argv[1], {"whole": True})
print("never reached", flush=True)
"""


def test_a_third_press_exits_at_once_but_after_the_file_being_written(tmp_path):
    target = tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(THIRD_PRESS), str(target)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == INTERRUPTED_EXIT_STATUS, done.stderr
    assert "never reached" not in done.stdout and "Traceback" not in done.stderr
    assert json.loads(target.read_text()) == {"whole": True}
    assert "exiting at once" in done.stderr
    assert list(tmp_path.glob(".*.tmp")) == []


def test_once_the_session_is_over_presses_are_ignored(controller):
    installed(controller)
    controller.session_over()
    signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN and not controller.interrupted


def test_a_pause_ends_as_soon_as_what_it_waits_for_is_done():
    import time as clock

    from harness.common.interrupts import INTERRUPTS

    started = clock.monotonic()
    INTERRUPTS.pause(5.0, until=lambda: clock.monotonic() - started > 0.1)
    assert clock.monotonic() - started < 1.0
