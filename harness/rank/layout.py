"""Conditions of a rank's process layout that only take effect when the process starts, set by
variables of its launch environment so that every launcher carries them (and an A/B can give them
to one side only, ``--launch-env NAME=1 --against env:NAME``):

- ``DLSCALE_NO_ASLR=1``: the rank runs without address-space randomisation (as under
  ``setarch -R``): the worker sets the personality flag and executes itself again, keeping its pid;
- ``DLSCALE_ENV_BYTES=N``: the rank's environment is padded to ``N`` bytes (the stack's start,
  and with it every frame's alignment, moves with the environment's size: Mytkowicz et al.,
  "Producing wrong data without doing anything obviously wrong!", ASPLOS 2009), by executing itself
  again with a padding variable;
- ``DLSCALE_FLUSH_DENORMAL=1``: a torch rank flushes denormal floats to zero
  (:func:`flush_denormals`).

Allocators (``LD_PRELOAD``), glibc's malloc thresholds (``MALLOC_*_``), torch's transparent huge
pages (``THP_MEM_ALLOC_ENABLE``) and Python's hash seed (``PYTHONHASHSEED``) are read by the
loader, glibc, torch and the interpreter themselves at start: their variables need nothing here.
What a rank ran with is in its record (:mod:`harness.rank.launch_facts`).
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Mapping

NO_ASLR = "DLSCALE_NO_ASLR"
ENV_BYTES = "DLSCALE_ENV_BYTES"
ENV_PAD = "DLSCALE_ENV_PAD"
FLUSH_DENORMAL = "DLSCALE_FLUSH_DENORMAL"
ADDR_NO_RANDOMIZE = 0x0040000
QUERY_PERSONALITY = 0xFFFFFFFF


def environment_bytes(env: Mapping[str, str]) -> int:
    """The size of ``env`` as the kernel lays it out on the stack: ``NAME=VALUE\\0`` each."""
    return sum(len(name.encode()) + len(value.encode()) + 2 for name, value in env.items())


def padded(env: Mapping[str, str], size: int) -> dict[str, str] | None:
    """``env`` with a padding variable making it exactly ``size`` bytes; None where it already is;
    ValueError where it is larger than ``size`` without any padding."""
    bare = {name: value for name, value in env.items() if name != ENV_PAD}
    room = size - environment_bytes(bare) - len(ENV_PAD) - 2
    if room < 0:
        raise ValueError(f"{ENV_BYTES}={size}: the rank's environment already takes "
                         f"{environment_bytes(bare)} bytes; give a larger size")
    if env.get(ENV_PAD) is not None and environment_bytes(env) == size:
        return None
    return {**bare, ENV_PAD: "x" * room}


def apply_at_start(argv: list[str]) -> None:
    """Execute the worker again where its launch environment asks for a layout only a new process
    image can have; returns where none is asked for or it is in place already."""
    env = dict(os.environ)
    again = False
    if env.get(NO_ASLR) == "1":
        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(QUERY_PERSONALITY)
        if current != -1 and not current & ADDR_NO_RANDOMIZE:
            if libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
                raise OSError(ctypes.get_errno(), f"{NO_ASLR}: cannot turn address-space randomisation off")
            again = True
    if env.get(ENV_BYTES):
        wanted = padded(env, int(env[ENV_BYTES]))
        if wanted is not None:
            env, again = wanted, True
    if again:
        os.execve(sys.executable, [sys.executable, *argv], env)


def flush_denormals() -> bool:
    """Whether this rank flushes denormals to zero, as its environment asks (torch ranks)."""
    if os.environ.get(FLUSH_DENORMAL) != "1":
        return False
    import torch

    return bool(torch.set_flush_denormal(True))
