#!/usr/bin/env bash
# The rank runtimes other than torch's, each in a virtual environment of its own beside the main one,
# where harness.rank.runtime.interpreter finds them (VENV-tensorflow, VENV-mxnet):
#   bash ci/install_runtimes.sh [VENV]        (VENV defaults to $DLSCALE_VENV, then .venv)
#
# TensorFlow 2.21 (a 572 MB wheel; Keras 3 comes with it) and MXNet 1.9.1, which imports on Python
# 3.11 only with numpy<1.24 (it uses numpy aliases removed in 1.24): that pin is why each runtime
# has its own environment rather than sharing torch's. Each also gets what the harness's rank-side
# modules import (numpy, threadpoolctl for the yardstick, google-crc32c for the TFRecord reader).
# Horovod is then built against TensorFlow (ci/install_horovod_tf.sh, its wheel cached like torch's).
# A second run only checks that each environment imports its framework at the pinned version.
# DLSCALE_RUNTIMES="tensorflow mxnet" picks which (an empty value installs none).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:-${DLSCALE_VENV:-$repo/.venv}}" && pwd)"
log() { printf '[install_runtimes] %s\n' "$*" >&2; }
harness_needs=(threadpoolctl==3.8.0 google-crc32c==1.9.0)
declare -A packages=(
    [tensorflow]="tensorflow==2.21.0"
    [mxnet]="mxnet==1.9.1 numpy<1.24"
)
declare -A versions=([tensorflow]=2.21.0 [mxnet]=1.9.1)

for runtime in ${DLSCALE_RUNTIMES-tensorflow mxnet}; do
    [[ -n "${packages[$runtime]:-}" ]] || { log "unknown runtime $runtime (known: ${!packages[*]})"; exit 2; }
    target="$venv-$runtime"
    check="import importlib.metadata as m, $runtime, threadpoolctl, google_crc32c; print(m.version('$runtime'))"
    if [[ "$("$target/bin/python" -c "$check" 2>/dev/null)" == "${versions[$runtime]}" ]]; then
        log "$runtime ${versions[$runtime]} ready in $target"
        continue
    fi
    [[ -x "$target/bin/python" ]] || python3 -m venv "$target"
    log "installing ${packages[$runtime]} into $target"
    started=$SECONDS
    # shellcheck disable=SC2086 - the package list splits on purpose
    "$target/bin/pip" install -q ${packages[$runtime]} "${harness_needs[@]}"
    "$target/bin/python" -c "$check" > /dev/null || { log "$runtime does not import in $target"; exit 1; }
    log "$runtime ${versions[$runtime]} installed in $target in $((SECONDS - started)) s"
done
if [[ " ${DLSCALE_RUNTIMES-tensorflow mxnet} " == *" tensorflow "* ]]; then
    "$repo/ci/install_horovod_tf.sh" "$venv-tensorflow"
fi
