#!/usr/bin/env bash
# Install NVIDIA DALI into a virtual environment, unless it already imports there:
#   bash ci/install_dali.sh [VENV]          (default: .venv next to this repository's ci/)
# DALI_PACKAGE overrides the wheel: pick the one for the site's CUDA major version,
#   CUDA 13: nvidia-dali-cuda130 (the default; it also runs without any GPU, device_id=None)
#   CUDA 12: nvidia-dali-cuda120 (a real wheel on PyPI, about 425 MB)
#   CUDA 11: nvidia-dali-cuda110 (DALI 1.x only: DALI 2.x supports CUDA 12 and 13; the PyPI package
#            is a stub that fetches the wheel from NVIDIA's own index while it installs, so that
#            index must be reachable, see DALI's installation guide)
# e.g. DALI_PACKAGE=nvidia-dali-cuda120==2.4.0 bash ci/install_dali.sh .venv
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv}"
package="${DALI_PACKAGE:-nvidia-dali-cuda130==2.4.0}"
log() { printf '[install_dali] %s\n' "$*" >&2; }

if [[ ! -x "$venv/bin/python" ]]; then
    log "no Python at $venv/bin/python: create the environment first (bash ci/setup.sh)"
    exit 2
fi
if version="$("$venv/bin/python" -c 'import nvidia.dali as d; print(d.__version__)' 2>/dev/null)"; then
    log "DALI $version already importable in $venv"
    exit 0
fi
log "installing $package into $venv"
"$venv/bin/pip" install -q "$package"
"$venv/bin/python" -c 'import nvidia.dali as d; print(f"[install_dali] DALI {d.__version__} installed", flush=True)' >&2
