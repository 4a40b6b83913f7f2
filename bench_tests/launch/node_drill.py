"""One cell run from inside host 0 of the two-node namespace cluster, as the runner of a real job
runs on its first node: this process sees only host 0's processes, so only the launcher's own
cross-node mechanism (the step's scancel, Open MPI's teardown, the sweep step on every node) can
end what the cell left on host 1.

    python -m bench_tests.launch.node_drill srun|mpirun|torchrun WORKDIR RESULT.json [--fault exit|hang|stuck]

Run inside an allocation of both nodes (``salloc -N2``). Writes RESULT.json with the run token,
when the runner decided the cell was over, the status, each rank's host and the processes swept on
each node; a Ctrl-C (SIGINT) is handled as in a suite session and recorded.
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

import harness.launch.runner
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import write_json_atomic
from harness.launch.launchers import MpirunLauncher, SrunLauncher, TorchrunLauncher
from harness.launch.runner import RunLimits, run_cell
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.spec import RankOptions

from ..workloads import TEST_MODEL, TINY

IFNAME = "dls0"
CELL = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=2)
LAUNCHERS = {
    "srun": lambda: SrunLauncher(environment={"GLOO_SOCKET_IFNAME": IFNAME}),
    # Open MPI's daemons and ranks talk over the hosts' link only (the loopback is per host).
    "mpirun": lambda: MpirunLauncher(environment={"GLOO_SOCKET_IFNAME": IFNAME, "OMPI_MCA_oob_tcp_if_include": IFNAME,
                                                  "OMPI_MCA_btl_tcp_if_include": IFNAME}),
    "torchrun": lambda: TorchrunLauncher(environment={"GLOO_SOCKET_IFNAME": IFNAME}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_tests.launch.node_drill")
    parser.add_argument("launcher", choices=sorted(LAUNCHERS))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--fault", choices=["exit", "hang", "stuck"])
    parser.add_argument("--heartbeat", type=float, default=30.0)
    args = parser.parse_args(argv)

    seen: dict = {"host": socket.gethostname(), "decided": None, "token": None, "elsewhere": None, "ranks": None}

    def marking(function, record_token: bool = False):
        def marked(*positional, **named):
            seen["decided"] = seen["decided"] or time.time()
            if record_token:
                seen["token"] = positional[0]
            return function(*positional, **named)
        return marked

    runner = harness.launch.runner
    runner._terminate = marking(runner._terminate)
    runner.kill_processes_with_token = marking(runner.kill_processes_with_token, record_token=True)
    launcher = LAUNCHERS[args.launcher]()
    cleanup = launcher.cleanup

    def recorded_cleanup(request):
        seen["token"] = request.token
        seen["elsewhere"] = cleanup(request)
        return seen["elsewhere"]

    launcher.cleanup = recorded_cleanup
    fault = Fault(rank=0 if args.fault == "exit" else 1, kind=args.fault, at_step=2) if args.fault else None
    INTERRUPTS.install()
    status, error, exit_status = "interrupted", None, 2
    try:
        run = run_cell(CELL, TINY, launcher, workdir=args.workdir, options=RankOptions(fault=fault),
                       limits=RunLimits(timeout_s=240, heartbeat_s=args.heartbeat))
        status, error, exit_status = run.status, run.error, 0
        seen["ranks"] = sorted((record["rank"], record["host"], record["source"]) for record in run.records)
    except KeyboardInterrupt:
        pass
    write_json_atomic(args.result, {**seen, "status": status, "error": error, "returned": time.time(),
                                    "presses": INTERRUPTS.presses})
    INTERRUPTS.session_over()
    return exit_status


if __name__ == "__main__":
    sys.exit(main())
