#!/usr/bin/env bash
# Install Horovod with TensorFlow support into the TensorFlow runtime's environment, idempotently:
#   bash ci/install_horovod_tf.sh [TF_VENV]   (TF_VENV defaults to $DLSCALE_VENV-tensorflow, then .venv-tensorflow)
#
# Horovod 0.28.1 is an sdist that compiles against the installed TensorFlow (about 4 minutes on 2
# cores), so its wheel is built once into a cache outside the repository, in a folder named after
# the TensorFlow and Python it was built against:
#   ${DLSCALE_CACHE:-~/.cache/dlscale}/wheels/horovod-0.28.1/tf<version>-cp<py>-<platform>[-opts<hash>]/
# (-opts<hash> when HOROVOD_* build variables are exported). A later run does nothing when
# horovod.tensorflow already imports, built against this TensorFlow; reinstalls the cached wheel in
# seconds when it does not; and rebuilds only when TensorFlow, Python or the options changed.
#
# TF 2.21's headers (XLA's, via tf.sysconfig) include highwayhash and farmhash from directories that
# tf.sysconfig.get_compile_flags() omits, and XLA moved xla_builder.h, which Horovod's XLA ops still
# include from its old path: the build adds those include directories and a one-line forwarding header.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-}"
if [[ -z "$venv" ]]; then
    venv="${DLSCALE_VENV:+$DLSCALE_VENV-tensorflow}"
    venv="${venv:-$repo/.venv-tensorflow}"
fi
log() { printf '[install_horovod_tf] %s\n' "$*" >&2; }
[[ -d "$venv" ]] || { log "no environment at $venv: run ci/install_runtimes.sh first"; exit 1; }
venv="$(cd "$venv" && pwd)"
cache="${DLSCALE_CACHE:-$HOME/.cache/dlscale}"
python="$venv/bin/python"
horovod_version=0.28.1
pip_install() { "$python" -m pip install -q "$@"; }

[[ -x "$python" ]] || { log "no Python at $python: run ci/install_runtimes.sh first"; exit 1; }
if ! "$python" -c 'import tensorflow' 2>/dev/null; then
    log "$python cannot import tensorflow: run ci/install_runtimes.sh first"
    exit 1
fi

horovod_works() {
    TF_CPP_MIN_LOG_LEVEL=3 "$python" - "$horovod_version" <<'EOF' 2>/dev/null
import json, pathlib, sys
import tensorflow as tf
import horovod
import horovod.tensorflow  # loads the compiled extension
# Against another TensorFlow the import may still succeed: compare the versions the build recorded.
built_against = json.loads((pathlib.Path(horovod.__file__).parent / "metadata.json").read_text()).get("tensorflow")
sys.exit(horovod.__version__ != sys.argv[1] or built_against != tf.__version__)
EOF
}
if horovod_works; then
    log "horovod $horovod_version with TensorFlow support already installed in $venv"
    exit 0
fi

build_key="$(TF_CPP_MIN_LOG_LEVEL=3 "$python" -c '
import sys, sysconfig, tensorflow as tf
tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
print(f"tf{tf.__version__}-{tag}-{sysconfig.get_platform()}".replace("+", "_"))' 2>/dev/null)"
build_options="$(env | grep '^HOROVOD_' | sort || true)"
[[ -z "$build_options" ]] || build_key+="-opts$(sha256sum <<< "$build_options" | cut -c1-8)"
wheels="$cache/wheels/horovod-$horovod_version/$build_key"
wheel="$(ls "$wheels"/horovod-"$horovod_version"-*.whl 2>/dev/null | head -n 1 || true)"

# Horovod's runtime requirements; installed first because its setup.py asks for them while building.
pip_install cloudpickle psutil pyyaml packaging "cffi>=1.4.0"

if [[ -z "$wheel" ]]; then
    build_env=(
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
        MAKEFLAGS="-j${DLSCALE_BUILD_JOBS:-$(nproc)}"  # setup.py's default -j8 overloads small machines
    )
    # Horovod needs CMake >= 3.13 (setup.py would otherwise pip-install one into a temporary folder);
    # CMake 4 refuses the cmake_minimum_required of Horovod's bundled third-party projects.
    cmake_version="$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9.]*\).*/\1/p' || true)"
    if ! "$python" -c 'import sys; from packaging.version import Version as V
v = sys.argv[1]; sys.exit(not v or not V("3.13") <= V(v) < V("4"))' "$cmake_version"; then
        log "no CMake 3.13 to 3.x on PATH${cmake_version:+ (found $cmake_version)}: installing one into $venv"
        pip_install "cmake>=3.13,<4"
        build_env+=(HOROVOD_CMAKE="$venv/bin/cmake")
    fi
    mkdir -p "$wheels"
    build_dir="$(mktemp -d)"
    trap 'rm -rf "$build_dir"' EXIT
    # The forwarding header for XLA's moved xla_builder.h, and the include directories TF's flags omit.
    mkdir -p "$build_dir/shim/tensorflow/compiler/xla/client"
    printf '%s\n' '// XLA moved this header; Horovod 0.28.1 includes it from its old path.' \
        '#include "xla/hlo/builder/xla_builder.h"' > "$build_dir/shim/tensorflow/compiler/xla/client/xla_builder.h"
    tf_include="$(TF_CPP_MIN_LOG_LEVEL=3 "$python" -c 'import tensorflow as tf; print(tf.sysconfig.get_include())' \
        2>/dev/null)"
    include_flags="-I$tf_include/external/highwayhash -I$tf_include/external/farmhash_archive/src -I$build_dir/shim"
    build_env+=(CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }$include_flags")
    log "building horovod $horovod_version against $build_key (several minutes; log: $wheels/build.log)"
    started=$SECONDS
    # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone and would hand back a wheel
    # built against another TensorFlow. --no-build-isolation: the build must see this TensorFlow.
    if ! (cd "$build_dir" && env "${build_env[@]}" "$python" -m pip wheel -v --no-deps --no-build-isolation \
            --no-cache-dir -w "$build_dir/out" "horovod==$horovod_version") > "$wheels/build.log" 2>&1; then
        tail -n 40 "$wheels/build.log" >&2
        log "horovod build failed; full log: $wheels/build.log"
        exit 1
    fi
    mv "$build_dir"/out/horovod-"$horovod_version"-*.whl "$wheels/"  # only a finished wheel lands in the cache
    wheel="$(ls "$wheels"/horovod-"$horovod_version"-*.whl | head -n 1)"
    log "built $(basename "$wheel") in $((SECONDS - started)) s"
fi

log "installing $(basename "$wheel") from the cache"
pip_install --no-deps --force-reinstall "$wheel"
horovod_works || { log "horovod installed from $wheel but 'import horovod.tensorflow' fails"; exit 1; }
log "horovod $horovod_version with TensorFlow support ready in $venv"
