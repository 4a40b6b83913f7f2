#!/usr/bin/env bash
# Idempotent set-up shared by the README commands and .ci/run:
#   Debian packages (Open MPI, Slurm, munge, valgrind and gcc for --count-instructions, chromium for the pages' tests), the virtual environment with pinned torch,
#   the harness itself with DeepSpeed, Horovod (built once, wheel cached) and DALI, the wheels of
#   the other pytest plugins the plugin must live beside (ci/other_plugins.txt), the
#   generated JPEG dataset in ImageFolder and TFRecord form, and a local one-node Slurm
#   cluster when no cluster answers. A second run only checks that each step is done.
#   DLSCALE_NO_APT=1: install no Debian packages; DLSCALE_NO_LOCAL_SLURM=1: start no local
#   cluster (a site's own cluster is found by asking it either way).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DLSCALE_VENV:-$repo/.venv}"
cache="${DLSCALE_CACHE:-$HOME/.cache/dlscale}"
log() { printf '[setup %4d s] %s\n' "$SECONDS" "$*" >&2; }

debian_packages=(openmpi-bin libopenmpi-dev slurm-wlm munge iproute2 procps valgrind gcc)
debian_packages+=(chromium chromium-driver)  # what the pages' browser tests open (bench_tests/unit/report/test_site_browser.py)
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

# Two chains at once: each has a download and a compile (the Horovod builds), so one chain's
# compile overlaps the other's download. A chain installs into its own environments only (torch's
# chain writes .venv, the runtimes' chain .venv-tensorflow and .venv-mxnet).
torch_chain() {
    stamp="$venv/.dlscale-installed"
    # The checkout's path is part of the stamp: an editable install points at one checkout only.
    want="$(cat "$repo/pyproject.toml" "$repo/ci/constraints.txt" | sha256sum | cut -c1-16) $repo"
    if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        log "installing dlscale and pinned dependencies into $venv"
        "$venv/bin/pip" install -q -c "$repo/ci/constraints.txt" -e "$repo[dev,mpi,deepspeed,references]"
        echo "$want" > "$stamp"
    fi

    other_pytest_plugins
    "$repo/ci/install_frameworks.sh" "$venv"
    "$repo/ci/install_dali.sh" "$venv"
    "$venv/bin/python" -m harness.data.dataset --ensure "$cache/dataset"
    "$venv/bin/python" -m harness.data.tfrecord --from "$cache/dataset" --to "$cache/dataset-tfrecord"
}
runtimes_chain() { "$repo/ci/install_runtimes.sh" "$venv"; }
# The wheels of the other pytest plugins (ci/other_plugins.txt) the plugin-coexistence test installs
# beside dlscale in an environment of its own; downloaded, not installed.
other_pytest_plugins() {
    local wheels="$cache/pytest-plugins" want
    want="$(sha256sum < "$repo/ci/other_plugins.txt" | cut -c1-16)"
    if [[ "$(cat "$wheels/.dlscale-downloaded" 2>/dev/null)" != "$want" ]]; then
        log "downloading the other pytest plugins into $wheels"
        "$venv/bin/pip" download -q --only-binary :all: -d "$wheels" -r "$repo/ci/other_plugins.txt"
        echo "$want" > "$wheels/.dlscale-downloaded"
    fi
}
kill_tree() {
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
logs="$(mktemp -d)"
declare -A chain_pids=()
# An interrupted or failed set-up leaves no chain running (pip, a compiler) behind it.
trap 'for pid in "${chain_pids[@]}"; do kill_tree "$pid"; done; rm -rf "$logs"' EXIT
for chain in torch_chain runtimes_chain; do
    ( started=$SECONDS; "$chain"; log "$chain done in $((SECONDS - started)) s" ) > "$logs/$chain.log" 2>&1 &
    chain_pids[$chain]=$!
done
failed=()
for chain in torch_chain runtimes_chain; do
    wait "${chain_pids[$chain]}" || failed+=("$chain")
    cat "$logs/$chain.log" >&2
done
if ((${#failed[@]})); then
    log "set-up failed in: ${failed[*]} (its output is above)"
    exit 1
fi

if [[ -n "${DLSCALE_NO_LOCAL_SLURM:-}" ]]; then
    log "DLSCALE_NO_LOCAL_SLURM set: no local Slurm cluster; srun cells run where a cluster answers"
else
    "$repo/ci/slurm/start.sh"
fi
log "set-up done"
