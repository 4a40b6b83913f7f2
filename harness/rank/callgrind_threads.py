"""A rank's threads under callgrind told apart: each thread's count of a step (callgrind's
``--separate-threads=yes`` writes a dump file per thread), its name and its kind.

A kind is :data:`RANK` for the thread that runs the step (valgrind's thread 1, the rank's main
thread) and the runtime's pools that run its operations for it (TensorFlow's, its collective
executor's, MXNet's engine), :data:`COMMUNICATION` for the threads that run a collective library's
algorithms (gloo's run loops, NCCL's, Horovod's background loop over gloo, 69-81% of whose count is
its all-reduces: the fusion buffer's copies, gloo's reductions, the averaging; the rest, its
negotiation, follows how many 1 ms cycles the gradients fall into and is counted apart, as its
waiting), :data:`TRANSPORT` for those that move the bytes as they arrive or poll for them (gloo's
TCP loop: its count follows when its peers' bytes come, from a few tens of thousands of instructions
a step to a few hundred thousand in the same cell; a thread that polls Open MPI's progress engine,
as Horovod's background loop over MPI does while it waits: 96% of its 227-315 million a step),
:data:`LOADER` for an input pipeline's (tf.data's, DALI's, torch's pin-memory thread) and
:data:`OTHER` for the rest. A thread is known by its name (``/proc/self/task/<lwpid>/comm``, matched
to valgrind's thread id through its scheduler's listing) where the library names its threads, else
by the functions its dump holds (Horovod's threads and the gloo it builds keep the interpreter's
name). A thread's dump names the functions it ran from wherever it stood when the instrumentation
started: a TCP loop caught inside an event's handler never names ``Loop::run`` (callgrind charges
the loop's own code to the handler it started in), so the handlers name it too.

A thread's kind takes its whole count but for the part it spends waiting for its peers,
:data:`WAITING_FUNCTIONS` (Horovod's ``WaitAndClear``, on the rank's thread: it polls its handle
until the background thread is done: 0.05 to 70 million instructions a step where the rest of the
rank's thread counts 896.7 to 896.9 million; Horovod's negotiation on its background loop, as many
rounds as the 1 ms cycles the gradients fall into), which counts as :data:`TRANSPORT`: it follows how
long the ranks wait for each other, not the code. Pure functions on the files' text.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping

RANK, COMMUNICATION, TRANSPORT, LOADER, OTHER = "rank", "communication", "transport", "loader", "other"
KINDS = (RANK, COMMUNICATION, TRANSPORT, LOADER, OTHER)
RANK_THREAD = 1
"""valgrind's id of a process's first thread: the rank's main thread, which runs its steps (on a
CPU, autograd runs the backward on the thread that calls it)."""

COMPUTE_NAMES = re.compile(r"^(?:tf_Compute|collective_ops)$")
COMPUTE_FUNCTIONS = re.compile(r"^(?:Eigen::ThreadPoolTempl<(?:tsl|tensorflow)::thread::EigenEnvironment>::WorkerLoop|"
                               r"mxnet::engine::ThreadedEngine::ExecuteOprBlock)\(")
"""A runtime's own pool that runs the step's operations for the rank's thread, which only dispatches
them: TensorFlow's (its inter-op pool, ``tf_Compute``, ran 697 million instructions of a CPU
rank's 712 million a step, the rank's thread 14.5 million) and MXNet's engine's workers (328
million of 340 million). Their threads are the rank's kind. So is TensorFlow's collective executor
(``collective_ops``): its ring reductions run on its own threads or on the compute pool, whichever
is free (1.62 million a step on one, then 0.22 million with the pool's thread 1.45 million more), so
no thread tells a TensorFlow rank's communication apart, and the rank's kind keeps their sum."""
TRANSPORT_NAMES = re.compile(r"tcp_loop|^event_engine$|^grpc", re.IGNORECASE)
"""gloo's TCP loop; gRPC's event engine and server threads, which carry TensorFlow's collectives'
bytes between workers (0.01 to 0.3 million instructions a step, thread by thread, as the bytes come)."""
COMMUNICATION_NAMES = re.compile(r"gloo|nccl|horovod|mpi|pmix|ucx|progress", re.IGNORECASE)
LOADER_NAMES = re.compile(r"tf_data|dali|pin_memory", re.IGNORECASE)
TRANSPORT_FUNCTIONS = re.compile(
    r"^(?:(?:non-virtual thunk to )?gloo::transport::tcp::(?:Loop::run|Pair::handleEvents|Listener::handleEvents)\(|"
    r"opal_progress$)")
"""Only gloo's TCP loop runs its pairs' event handlers (its loop calls them as descriptors become
ready); a thread that calls Open MPI's progress engine polls it."""
COMMUNICATION_FUNCTIONS = re.compile(
    r"^(?:.*\s)?(?:gloo::|c10d::|horovod::|nccl|ompi_|opal_|mca_|PMPI_|ucp_|uct_)")
LOADER_FUNCTIONS = re.compile(r"^(?:.*\s)?(?:tensorflow::data::|dali::)")
WAITING_FUNCTIONS = re.compile(r"^horovod::(?:torch::WaitAndClear|common::Controller::ComputeResponseList)\(")
"""Functions whose inclusive count follows how long a thread waits for its peers, not the code:
Horovod's torch binding polls its handle, releasing and taking the GIL each time, until the
background thread is done (83,419 polls in one step); Horovod's background loop negotiates what
is ready with the other ranks once a 1 ms cycle, as many times as the cycles the gradients fall
into (0.43 to 0.61 million instructions a rank-step where its all-reduces and the rest of the loop
counted 3.02 to 3.14 million, 0.74 to 0.95 against 2.45 to 2.50 with every gradient its own
all-reduce, four launches each; with it the loop's two steps were up to 10.3% apart in a launch)."""

_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)
_FUNCTION = re.compile(r"^c?fn=(?:\(\d+\) ?)?(.*)$", re.MULTILINE)
_THREAD_FILE = re.compile(r"-(\d+)$")
_POSITIONS = re.compile(r"^positions:\s*(.*)$", re.MULTILINE)
_SCHEDULED = re.compile(r"^(?:==\d+==\s*)?Thread (\d+): status = .*\(lwpid (\d+)\)", re.MULTILINE)


def dump_total(text: str) -> int | None:
    """The instructions a callgrind dump totals (None: no totals line, a dump cut short)."""
    found = _TOTALS.search(text)
    return int(found.group(1)) if found else None


def dump_functions(text: str) -> set[str]:
    """The functions a dump names: those its thread ran and those they called."""
    return {name.strip() for name in _FUNCTION.findall(text) if name.strip()}


def waiting_count(text: str, waiting: re.Pattern = WAITING_FUNCTIONS) -> int:
    """The instructions a dump's thread spent waiting for its peers, inside ``waiting``'s functions:
    the inclusive cost of every call into one of ``waiting`` from a function that is not one (the
    cost line after each ``calls=`` line of callgrind's format is the call's inclusive cost)."""
    positions = _POSITIONS.search(text)
    columns = len(positions.group(1).split()) if positions else 1
    names: dict[str, str] = {}
    caller = callee = None
    call_follows = False
    total = 0
    for line in text.splitlines():
        if call_follows:
            call_follows = False
            parts = line.split()
            if callee and waiting.match(callee) and not (caller and waiting.match(caller)) and len(parts) > columns:
                total += int(parts[columns])
        elif line.startswith("fn="):
            caller = _named(line[3:], names)
        elif line.startswith("cfn="):
            callee = _named(line[4:], names)
        elif line.startswith("calls="):
            call_follows = True
    return total


def _named(spec: str, names: dict[str, str]) -> str:
    """A function's name in a ``fn=``/``cfn=`` line: ``(id) name`` defines the id, ``(id)`` reuses it."""
    spec = spec.strip()
    if spec.startswith("(") and ")" in spec:
        ident, _, name = spec[1:].partition(")")
        name = name.strip()
        if name:
            names[ident] = name
        return names.get(ident, "")
    return spec


def thread_files(directory: Path, output_name: str, dump: int) -> dict[int, Path]:
    """The per-thread files of dump ``dump`` (``<output>.<dump>-<thread>``), by valgrind's thread id."""
    found = {}
    for path in directory.glob(f"{output_name}.{dump}-*"):
        if match := _THREAD_FILE.search(path.name):
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def scheduler_lwpids(listing: str) -> list[dict[int, int]]:
    """Each ``v.info scheduler`` listing in valgrind's log, in order: valgrind's thread id -> the
    kernel's thread id (its lwpid)."""
    listings: list[dict[int, int]] = []
    previous = None
    for match in _SCHEDULED.finditer(listing):
        tid, lwpid = int(match.group(1)), int(match.group(2))
        if previous is None or tid <= previous:  # a listing starts again at its first thread
            listings.append({})
        listings[-1][tid] = lwpid
        previous = tid
    return listings


def thread_kind(thread: int, name: str | None, functions: Iterable[str]) -> str:
    """What a thread is: the rank's own (its main thread, or its runtime's compute pool),
    communication, transport, loader or other."""
    if thread == RANK_THREAD:
        return RANK
    if name and TRANSPORT_NAMES.search(name):
        return TRANSPORT
    if name and COMMUNICATION_NAMES.search(name):
        return COMMUNICATION
    if name and LOADER_NAMES.search(name):
        return LOADER
    if name and COMPUTE_NAMES.search(name):
        return RANK
    functions = list(functions)
    if any(TRANSPORT_FUNCTIONS.match(function) for function in functions):
        return TRANSPORT
    if any(COMPUTE_FUNCTIONS.match(function) for function in functions):
        return RANK  # before communication: Horovod's TensorFlow operations run in the pool too
    if any(COMMUNICATION_FUNCTIONS.match(function) for function in functions):
        return COMMUNICATION
    if any(LOADER_FUNCTIONS.match(function) for function in functions):
        return LOADER
    return OTHER


def step_threads(files: Mapping[int, Path], names: Mapping[int, str]) -> list[dict]:
    """A step's threads: each with its id, name (None: unknown), kind, count (the whole thread's)
    and ``waiting`` (the part of it in :data:`WAITING_FUNCTIONS`, counted as transport)."""
    threads = []
    for thread, path in files.items():
        text = path.read_text(errors="replace")
        total = dump_total(text)
        if total is None:
            raise ValueError(f"{path.name} has no totals line")
        name = names.get(thread)
        kind = thread_kind(thread, name, () if thread == RANK_THREAD else dump_functions(text))
        waiting = 0 if kind == TRANSPORT else min(waiting_count(text), total)
        threads.append({"thread": thread, "name": name, "kind": kind, "count": total, "waiting": waiting,
                        "file": path.name})
    return threads


def by_kind(threads: Iterable[Mapping]) -> dict[str, int]:
    """A step's count per thread kind, every kind present (0: no thread of it ran); a thread's
    waiting part is transport's."""
    counts = dict.fromkeys(KINDS, 0)
    for thread in threads:
        waiting = thread.get("waiting", 0)
        counts[thread["kind"]] += thread["count"] - waiting
        counts[TRANSPORT] += waiting
    return counts
