"""A rank's threads under callgrind told apart (harness.rank.callgrind_threads), on files a real
2-rank DDP launch wrote (``callgrind/``: rank 0's dumps of its second counted step for three of its
threads, one file a thread, and its valgrind log with the two scheduler listings the rank asked for)."""
from pathlib import Path

import pytest

from harness.rank.callgrind_threads import (COMMUNICATION, LOADER, OTHER, RANK, TRANSPORT, by_kind, dump_functions,
                                            dump_total, scheduler_lwpids, step_threads, thread_files, thread_kind)

LAUNCH = Path(__file__).with_name("callgrind")
OUTPUT = "callgrind-5547.out"


def test_each_threads_file_of_a_dump_is_found_by_its_thread_id():
    files = thread_files(LAUNCH, OUTPUT, 2)
    assert list(files) == [2, 3, 5] and files[3].name == "callgrind-5547.out.2-03"
    assert thread_files(LAUNCH, OUTPUT, 1) == {}


def test_a_dump_totals_its_threads_instructions_and_names_the_functions_it_ran():
    text = (LAUNCH / "callgrind-5547.out.2-03").read_text()
    assert dump_total(text) == 240_491
    functions = dump_functions(text)
    assert "gloo::transport::tcp::Pair::read()" in functions and "epoll_wait" in functions
    assert not any(name.startswith("(") for name in functions)  # a name given once is not read as its id
    assert dump_total("events: Ir\nfn=(1) f\n0 5\n") is None  # a dump cut short


def test_the_scheduler_listings_map_valgrinds_thread_ids_to_the_kernels():
    """valgrind's ids are not the kernel's creation order: thread 2 is the youngest (lwpid 5718), and
    by the second listing it has ended and its id is free, then 6 came."""
    first, second = scheduler_lwpids((LAUNCH / "valgrind-5547.log").read_text())
    assert first == {1: 5547, 2: 5718, 3: 5681, 4: 5684, 5: 5685}
    assert second == {1: 5547, 2: 0, 3: 5681, 4: 5684, 5: 5685, 6: 5817}


@pytest.mark.parametrize("thread, name, functions, kind", [
    (1, "callgrind-amd64", ["c10d::ProcessGroupGloo::allreduce"], RANK),  # the main thread runs the step
    (3, "gloo_tcp_loop", [], TRANSPORT),  # moves the bytes as they come
    (3, None, ["gloo::transport::tcp::Loop::run()", "epoll_wait"], TRANSPORT),
    (4, "pt_gloo_runloop", [], COMMUNICATION),
    (7, "pt_nccl_watchdg", [], COMMUNICATION),
    # Horovod's thread keeps the interpreter's name: known by its functions
    (8, "python3", ["horovod::common::(anonymous namespace)::BackgroundThreadLoop("
                    "horovod::common::HorovodGlobalState&)"], COMMUNICATION),
    (8, "callgrind-amd64", ["horovod::common::HorovodOp::ScaleBuffer(double)", "opal_progress",
                            "ompi_coll_libnbc_progress"], TRANSPORT),  # over MPI it polls MPI's progress engine
    (9, "tf_data_private_threadpool", [], LOADER),
    (10, "python3", ["dali::ThreadPool::ThreadMain(int, int, bool, std::string const&)"], LOADER),
    (11, "python3", ["PyThread_acquire_lock_timed", "sem_clockwait"], OTHER),
    (12, None, [], OTHER),
])
def test_a_thread_is_known_by_its_name_else_by_its_functions(thread, name, functions, kind):
    assert thread_kind(thread, name, functions) == kind


def test_a_steps_threads_are_counted_each_with_its_kind_and_summed_by_kind():
    names = {2: None, 3: "gloo_tcp_loop", 5: "pt_gloo_runloop"}
    threads = step_threads(thread_files(LAUNCH, OUTPUT, 2), names)
    assert [(thread["thread"], thread["kind"], thread["count"]) for thread in threads] == [
        (2, OTHER, 71), (3, TRANSPORT, 240_491), (5, COMMUNICATION, 15_178)]
    unnamed = step_threads(thread_files(LAUNCH, OUTPUT, 2), {})  # no listing: gloo's functions tell
    assert [thread["kind"] for thread in unnamed] == [OTHER, TRANSPORT, COMMUNICATION]
    assert by_kind(threads) == {RANK: 0, COMMUNICATION: 15_178, TRANSPORT: 240_491, LOADER: 0, OTHER: 71}
