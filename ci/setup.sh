#!/usr/bin/env bash
# Idempotent set-up shared by the README commands and .ci/run:
#   Debian packages (Open MPI, Slurm, munge), the virtual environment with pinned torch,
#   the harness itself with DeepSpeed, Horovod (built once, wheel cached) and DALI, the
#   generated JPEG dataset in ImageFolder and TFRecord form, and a local one-node Slurm
#   cluster when no cluster answers. A second run only checks that each step is done.
#   DLSCALE_NO_APT=1: install no Debian packages; DLSCALE_NO_LOCAL_SLURM=1: start no local
#   cluster (a site's own cluster is found by asking it either way).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DLSCALE_VENV:-$repo/.venv}"
cache="${DLSCALE_CACHE:-$HOME/.cache/dlscale}"
log() { printf '[setup] %s\n' "$*" >&2; }

debian_packages=(openmpi-bin libopenmpi-dev slurm-wlm munge iproute2 procps)
missing=()
for pkg in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})) && [[ -n "${DLSCALE_NO_APT:-}" ]]; then
    log "DLSCALE_NO_APT set: not installing ${missing[*]}; the cells needing them are skipped with the reason"
elif ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x "$venv/bin/python" ]]; then
    log "creating virtual environment $venv"
    python3 -m venv "$venv"
fi
stamp="$venv/.dlscale-installed"
# The checkout's path is part of the stamp: an editable install points at one checkout only.
want="$(cat "$repo/pyproject.toml" "$repo/ci/constraints.txt" | sha256sum | cut -c1-16) $repo"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing dlscale and pinned dependencies into $venv"
    "$venv/bin/pip" install -q -c "$repo/ci/constraints.txt" -e "$repo[dev,mpi,deepspeed]"
    echo "$want" > "$stamp"
fi
"$repo/ci/install_frameworks.sh" "$venv"
"$repo/ci/install_dali.sh" "$venv"
"$repo/ci/install_runtimes.sh" "$venv"

"$venv/bin/python" -m harness.data.dataset --ensure "$cache/dataset" >&2
"$venv/bin/python" -m harness.data.tfrecord --from "$cache/dataset" --to "$cache/dataset-tfrecord" >&2

if [[ -n "${DLSCALE_NO_LOCAL_SLURM:-}" ]]; then
    log "DLSCALE_NO_LOCAL_SLURM set: no local Slurm cluster; srun cells run where a cluster answers"
else
    "$repo/ci/slurm/start.sh"
fi
