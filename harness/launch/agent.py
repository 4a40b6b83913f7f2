"""torchrun's agent on one node of a Slurm job step (``python -m harness.launch.agent ARGS``).

srun starts one per node; each replaces itself by ``torch.distributed.run ARGS`` with a c10d
rendezvous on the step's first node, at ``MASTER_PORT``, so that every agent names the same host
without the pytest process, which may run on a login node, having to know which nodes srun chose.
"""
from __future__ import annotations

import os
import sys

from harness.machine.allocation import first_host


def agent_command(argv: list[str], env=os.environ) -> list[str]:
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist or not env.get("MASTER_PORT"):
        raise SystemExit("harness.launch.agent runs as a task of a Slurm job step with MASTER_PORT set "
                         "(dlscale's torchrun launcher inside an allocation)")
    return [sys.executable, "-m", "torch.distributed.run", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={first_host(nodelist)}:{env['MASTER_PORT']}", *argv]


if __name__ == "__main__":
    command = agent_command(sys.argv[1:])
    os.execv(command[0], command)
