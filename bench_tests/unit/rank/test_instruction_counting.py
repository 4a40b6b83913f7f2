"""A process under callgrind counting its steps as a rank does (harness.rank.instructions), where the
step hands work to a thread it started, named as gloo names its run loops: that thread's instructions
are in the step's count, as the communication threads', beside the main thread's own."""
import json
import subprocess
import sys
import textwrap

import pytest

from harness.rank.instructions import INSTRUCTION_STEPS, missing_tools

STEP = textwrap.dedent("""
    import ctypes, json, sys, threading
    from pathlib import Path
    from harness.rank.instructions import InstructionCounting, exec_under_callgrind

    output = Path(sys.argv[1])
    exec_under_callgrind([sys.argv[0], *sys.argv[1:]], output)  # returns once under callgrind
    counting = InstructionCounting(output)
    asked, answered = threading.Semaphore(0), threading.Semaphore(0)

    def communicate():  # a thread the step's code never runs on: only collection on every thread counts it
        ctypes.CDLL(None).prctl(15, b"pt_gloo_runloop", 0, 0, 0)
        while True:
            asked.acquire()
            sum(i * i for i in range(20000))
            answered.release()

    threading.Thread(target=communicate, daemon=True).start()
    for step in range(counting.steps):
        counting.start()
        sum(range(2000))
        asked.release()
        answered.acquire()
        counting.stop(1)
    print(json.dumps(counting.result()))
""")


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    if reason := missing_tools():
        pytest.skip(reason)
    output = tmp_path_factory.mktemp("callgrind")
    script = output / "step.py"
    script.write_text(STEP)
    done = subprocess.run([sys.executable, str(script), str(output)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_thread_the_step_hands_work_to_is_counted_as_communication(counted):
    assert len(counted["steps"]) == INSTRUCTION_STEPS
    # the thread's 20,000 squares take some 12M instructions a step, the main thread's own 0.4M; a
    # rank that toggled collection on its own thread only counted 0.36M
    assert all(total > 5_000_000 for total in counted["steps"]), counted["steps"]
    communication = counted["kinds"]["communication"]
    assert all(count > 5_000_000 for count in communication), counted["kinds"]
    assert all(count > 0 for count in counted["kinds"]["rank"])
    assert counted["steps"] == [sum(counted["kinds"][kind][step] for kind in counted["kinds"])
                                for step in range(INSTRUCTION_STEPS)]
    assert counted["per_step"] == counted["steps"][-1]


def test_each_thread_is_listed_with_its_name_and_its_files_kept(counted):
    named = {thread["name"]: thread for thread in counted["threads"]}
    assert named["pt_gloo_runloop"]["kind"] == "communication"
    assert named["pt_gloo_runloop"]["steps"] == counted["kinds"]["communication"]
    rank, = (thread for thread in counted["threads"] if thread["kind"] == "rank")
    assert rank["thread"] == 1 and counted["files"][-1] == f"{counted['thread_files'][0]}"
    assert len(counted["thread_files"]) >= 2
