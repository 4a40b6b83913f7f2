"""A rank's threads under callgrind told apart (harness.rank.callgrind_threads), on files a real
2-rank DDP launch wrote (``callgrind/``: rank 0's dumps of its second counted step for three of its
threads, one file a thread, and its valgrind log with the two scheduler listings the rank asked for)."""
from pathlib import Path

import pytest

from harness.rank.callgrind_threads import (COMMUNICATION, LOADER, OTHER, RANK, TRANSPORT, by_kind, dump_functions,
                                            dump_total, scheduler_lwpids, step_threads, thread_files, thread_kind,
                                            waiting_count)

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
    # TensorFlow's collective executor runs the ring's reductions on its threads or on the compute
    # pool, whichever is free: the rank's kind keeps both; gRPC's threads move the bytes
    (101, "collective_ops", [], RANK),
    (12, "event_engine", [], TRANSPORT),
    (17, "grpcpp_sync_ser", [], TRANSPORT),
    # TensorFlow's inter-op pool runs the step's operations: 98% of a rank's instructions a step
    (4, "tf_Compute", [], RANK),
    (4, "callgrind-amd64", ["Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::WorkerLoop(int)",
                            "Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::WaitForWork("
                            "Eigen::EventCount::Waiter*, tsl::thread::EigenEnvironment::Task*)"], RANK),
    # MXNet's engine workers keep the interpreter's name, and run the operators the rank pushes
    (7, "callgrind-amd64", ["mxnet::engine::ThreadedEngine::ExecuteOprBlock(mxnet::RunContext, "
                            "mxnet::engine::OprBlock*)", "pthread_mutex_unlock@@GLIBC_2.2.5"], RANK),
    # Horovod's TensorFlow operations enqueue their tensors from the pool: it stays the rank's
    (4, None, ["Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::WorkerLoop(int)",
               "horovod::common::EnqueueTensorAllreduces(std::vector<std::shared_ptr<horovod::common::OpContext>, "
               "std::allocator<std::shared_ptr<horovod::common::OpContext> > >&)"], RANK),
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


# Excerpts of a real 2-rank Horovod-over-gloo launch (horovodrun --gloo, horovod 0.28.1, ResNet20
# at 32 px, docs/measurements.md "Horovod over gloo under callgrind"): each line as callgrind wrote
# it, the lines between left out.
HOROVOD_LOOP_CAUGHT_IN_A_HANDLER = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 20543
cmd:  /work/main/.venv/bin/python -m harness.rank.worker /tmp/hvdcg/a2/horovod-synthetic-resnet20-g2/spec.json
part: 1
thread: 5

positions: line
events: Ir
summary: 194176

ob=(98) /work/main/.venv/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so
fl=(52) /tmp/pip-wheel-829qsl1o/horovod_1b35f60f737b485d9ac3408368be7214/third_party/gloo/gloo/transport/tcp/pair.cc
fn=(630) gloo::transport::tcp::Pair::handleEvents(int)
fi=(53) /usr/include/c++/12/bits/atomic_base.h
488 193
fi=(54) /tmp/pip-wheel-829qsl1o/horovod_1b35f60f737b485d9ac3408368be7214/third_party/gloo/gloo/transport/tcp/loop.cc
152 386
+2 1060
cob=(5) /usr/lib/x86_64-linux-gnu/libc.so.6
cfi=(57) ./misc/../sysdeps/unix/sysv/linux/epoll_wait.c
cfn=(648) epoll_wait
calls=1060 30 
* 58271
* 1060
cfi=(116) /tmp/pip-wheel-829qsl1o/horovod_1b35f60f737b485d9ac3408368be7214/third_party/gloo/gloo/transport/tcp/pair.h
cfn=(6950) non-virtual thunk to gloo::transport::tcp::Pair::handleEvents(int)
calls=866 -25 
* 82538
-2 1734

totals: 194176
"""
"""Rank 0's second TCP loop (valgrind's thread 5), the first counted step: caught inside an event's
handler when the instrumentation started, it never names ``Loop::run``; callgrind charges the loop's
own lines (loop.cc) to the handler. Read by its gloo functions alone it was communication."""

HOROVOD_RANK_THREAD_WAITING = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 21260
cmd:  /work/main/.venv/bin/python -m harness.rank.worker /tmp/hvdcg/f1/horovod-synthetic-resnet20-g2/spec.json
part: 1
thread: 1

positions: line
events: Ir
summary: 946394931

fn=(10480) pybind11::cpp_function::initialize<void (*&)(int), void, int, pybind11::name, pybind11::scope, pybind11::sibling>(void (*&)(int), void (*)(int), pybind11::name const&, pybind11::scope const&, pybind11::sibling const&)::{lambda(pybind11::detail::function_call&)#3}::_FUN(pybind11::detail::function_call&)
2190 177
cfn=(8008) pybind11::detail::type_caster<int, void>::load(pybind11::handle, bool)
calls=59 242 
* 5251
* 59
cfi=(191) /tmp/pip-wheel-829qsl1o/horovod_1b35f60f737b485d9ac3408368be7214/horovod/torch/mpi_ops_v2.cc
cfn=(10488) horovod::torch::WaitAndClear(int)
calls=59 1121 
* 49675993
fi=(187) /root/.pyenv/versions/3.11.7/include/python3.11/object.h
502 118

fn=(10488)
1121 354
+2 177
cfi=(195)
cfn=(10490) horovod::torch::HandleManager::PollHandle(int)
calls=59 33 
* 8260
* 118
fe=(191)
1123 250257
cfi=(195)
cfn=(10490)
calls=83419 33 
* 11678660
* 166838

totals: 946394985
"""
"""Rank 0's own thread (valgrind's thread 1), the first counted step of a launch with
HOROVOD_FUSION_THRESHOLD=0: the 59 gradients' ``synchronize`` polled their handles 83,419 times,
49,675,993 instructions of its 946,394,985 (the next step: 16,575,506 of 913,281,624; the rest
896,718,992 and 896,706,118)."""

HOROVOD_BACKGROUND_LOOP_NEGOTIATING = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 2943
cmd:  /work/main/.venv/bin/python -m harness.rank.worker /tmp/hvd1/default/horovod-synthetic-resnet20-g2/spec.json
part: 1
thread: 3

positions: line
events: Ir
summary: 3592853

fn=(3466) horovod::common::Controller::ComputeResponseList(bool, horovod::common::HorovodGlobalState&, horovod::common::ProcessSet&)
76 44
+4 4
cfi=(135) /tmp/pip-wheel-829qsl1o/horovod_1b35f60f737b485d9ac3408368be7214/horovod/common/tensor_queue.cc
cfn=(3560) horovod::common::TensorQueue::PopMessagesFromQueue(std::deque<horovod::common::Request, std::allocator<horovod::common::Request> >&)
calls=4 +72 
* 7322

fn=(3496) horovod::common::(anonymous namespace)::BackgroundThreadLoop(horovod::common::HorovodGlobalState&)
753 4
cfi=(132)
cfn=(3466)
calls=4 76 
* 456017
cfi=(115)
cfn=(3464) horovod::common::Controller::ComputeResponseList(bool, horovod::common::HorovodGlobalState&, horovod::common::ProcessSet&)
calls=1 474 
* 4653
* 4

totals: 3592853
"""
"""Rank 0's Horovod background loop over gloo (valgrind's thread 3), the first counted step at the
default fusion threshold: its four negotiations (two entries of ``ComputeResponseList``, the second
still running when the step was dumped) counted 460,670 of its 3,592,853 instructions; in the next
step 533,898 of 3,629,323, while the rest of the loop counted 3,132,183 and 3,095,425."""

HOROVOD_GLOO_BACKGROUND_LOOP = [  # rank 0's valgrind thread 3, among the 281 functions of its step's dump
    "horovod::common::(anonymous namespace)::BackgroundThreadLoop(horovod::common::HorovodGlobalState&)",
    "horovod::common::GlooAllreduce::Execute(std::vector<horovod::common::TensorTableEntry, "
    "std::allocator<horovod::common::TensorTableEntry> >&, horovod::common::Response const&)",
    "gloo::allreduce(gloo::AllreduceOptions const&)", "void gloo::sum<float>(void*, void const*, void const*, unsigned long)",
    "gloo::transport::tcp::Pair::send(gloo::transport::UnboundBuffer*, unsigned long, unsigned long, unsigned long)",
    "gloo::transport::tcp::Pair::write(gloo::transport::tcp::Op&)",
    "gloo::transport::tcp::UnboundBuffer::handleSendCompletion(int)",
    "gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, std::ratio<1l, 1000l> >)",
    "__memcpy_avx_unaligned_erms", "epoll_wait"]


@pytest.mark.parametrize("functions, kind", [
    # Horovod's background loop over gloo runs gloo's all-reduces itself (and writes to its pairs, and
    # waits for their receives), but never handles a pair's events: communication
    (HOROVOD_GLOO_BACKGROUND_LOOP, COMMUNICATION),
    # a TCP loop that names no Loop::run: its pairs' event handlers name it
    (sorted(dump_functions(HOROVOD_LOOP_CAUGHT_IN_A_HANDLER)), TRANSPORT),
    (["gloo::transport::tcp::Pair::handleEvents(int)'2", "gloo::transport::tcp::Pair::read()", "recv"], TRANSPORT),
])
def test_horovod_over_gloos_threads_are_known_by_their_functions(functions, kind):
    assert thread_kind(5, "callgrind-amd64", functions) == kind  # they keep the interpreter's name under valgrind


def test_the_rank_threads_polling_for_horovods_handles_is_counted_apart_as_transport(tmp_path):
    """The inclusive count of each call into WaitAndClear from outside it (its calls to PollHandle
    inside it are not counted again); the rest of the thread stays the rank's."""
    assert waiting_count(HOROVOD_RANK_THREAD_WAITING) == 49_675_993
    assert waiting_count(HOROVOD_LOOP_CAUGHT_IN_A_HANDLER) == 0
    assert waiting_count((LAUNCH / "callgrind-5547.out.2-03").read_text()) == 0  # DDP's threads wait on no handle
    (tmp_path / "callgrind-21260.out.1-01").write_text(HOROVOD_RANK_THREAD_WAITING)
    (tmp_path / "callgrind-21260.out.1-05").write_text(HOROVOD_LOOP_CAUGHT_IN_A_HANDLER)
    threads = step_threads(thread_files(tmp_path, "callgrind-21260.out", 1), {1: "callgrind-amd64", 5: "callgrind-amd64"})
    assert [(thread["thread"], thread["kind"], thread["count"], thread["waiting"]) for thread in threads] == [
        (1, RANK, 946_394_985, 49_675_993), (5, TRANSPORT, 194_176, 0)]
    assert by_kind(threads) == {RANK: 896_718_992, COMMUNICATION: 0, TRANSPORT: 49_675_993 + 194_176, LOADER: 0, OTHER: 0}


def test_horovods_negotiation_on_its_background_loop_is_counted_apart_as_transport(tmp_path):
    """Each negotiation follows how the gradients fall into Horovod's 1 ms cycles, not the code: its
    inclusive count (both entries the dump names, not the functions it calls again) is the loop's
    waiting; the all-reduces and the rest of the loop stay communication."""
    assert waiting_count(HOROVOD_BACKGROUND_LOOP_NEGOTIATING) == 456_017 + 4_653
    (tmp_path / "callgrind-2943.out.1-03").write_text(HOROVOD_BACKGROUND_LOOP_NEGOTIATING)
    threads = step_threads(thread_files(tmp_path, "callgrind-2943.out", 1), {3: "callgrind-amd64"})
    assert [(thread["kind"], thread["count"], thread["waiting"]) for thread in threads] == [
        (COMMUNICATION, 3_592_853, 460_670)]
    assert by_kind(threads) == {RANK: 0, COMMUNICATION: 3_132_183, TRANSPORT: 460_670, LOADER: 0, OTHER: 0}
