#!/usr/bin/env bash
# Install the optional frameworks into a virtual environment, idempotently:
#   bash ci/install_frameworks.sh [VENV]        (VENV defaults to $DLSCALE_VENV, then .venv)
#
# DeepSpeed is a pinned package. Horovod 0.28.1 exists only as an sdist that compiles against the
# installed torch (3 to 9 minutes on 2 cores), so its wheel is built once into a cache outside the
# repository, in a folder named after the torch and Python it was built against:
#   ${DLSCALE_CACHE:-~/.cache/dlscale}/wheels/horovod-0.28.1/torch<version>-cu<cuda>-cp<py>-<platform>[-opts<hash>]/
# (-opts<hash> when HOROVOD_* build variables are exported, e.g. HOROVOD_GPU_OPERATIONS=NCCL on a
# GPU cluster). A later run does nothing when Horovod already imports with torch support, reinstalls
# the cached wheel in seconds when it does not, and rebuilds only when torch, Python or options changed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(cd "${1:-${DLSCALE_VENV:-$repo/.venv}}" && pwd)"
cache="${DLSCALE_CACHE:-$HOME/.cache/dlscale}"
constraints="$repo/ci/constraints.txt"
python="$venv/bin/python"
deepspeed_version=0.19.8
horovod_version=0.28.1
log() { printf '[install_frameworks] %s\n' "$*" >&2; }
pip_install() { "$python" -m pip install -q -c "$constraints" "$@"; }

[[ -x "$python" ]] || { log "no Python at $python: run ci/setup.sh first"; exit 1; }

# --- DeepSpeed ------------------------------------------------------------------------------------
installed="$("$python" -c 'import importlib.metadata as m; print(m.version("deepspeed"))' 2>/dev/null || true)"
if [[ "$installed" != "$deepspeed_version" ]]; then
    log "installing deepspeed==$deepspeed_version"
    pip_install "deepspeed==$deepspeed_version"  # the constraints keep the pinned torch
fi
# DeepSpeed JIT-compiles its shared-memory comm op (CPU accelerator) the first time a process group
# starts, which takes minutes: compile it now (into torch's extension cache), not inside a cell.
ops_stamp="$venv/.dlscale-deepspeed-ops"
ops_want="$deepspeed_version $("$python" -c 'import torch; print(torch.__version__)')"
if [[ "$(cat "$ops_stamp" 2>/dev/null)" != "$ops_want" ]]; then
    log "compiling DeepSpeed's shared-memory comm op (first use only)"
    if ! output="$("$python" -c 'from deepspeed.comm.torch import build_shm_op; build_shm_op()' 2>&1)"; then
        printf '%s\n' "$output" >&2
        log "DeepSpeed could not compile its comm op (above)"
        exit 1
    fi
    echo "$ops_want" > "$ops_stamp"
fi

# --- Horovod --------------------------------------------------------------------------------------
horovod_works() {
    "$python" - "$horovod_version" <<'EOF' 2>/dev/null
import json, pathlib, sys
import torch
import horovod
import horovod.torch  # loads the compiled extension
# Against another torch the import may still succeed, with only a warning: compare the versions.
built_against = json.loads((pathlib.Path(horovod.__file__).parent / "metadata.json").read_text()).get("pytorch")
sys.exit(horovod.__version__ != sys.argv[1] or built_against != torch.__version__)
EOF
}
if horovod_works; then
    log "horovod $horovod_version with torch support already installed"
    exit 0
fi

build_key="$("$python" -c '
import sys, sysconfig, torch
cuda = "cu" + torch.version.cuda if torch.version.cuda else "cpu"
tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
print(f"torch{torch.__version__}-{cuda}-{tag}-{sysconfig.get_platform()}".replace("+", "_"))')"
build_options="$(env | grep '^HOROVOD_' | sort || true)"
[[ -z "$build_options" ]] || build_key+="-opts$(sha256sum <<< "$build_options" | cut -c1-8)"
wheels="$cache/wheels/horovod-$horovod_version/$build_key"
wheel="$(ls "$wheels"/horovod-"$horovod_version"-*.whl 2>/dev/null | head -n 1 || true)"

# Horovod's runtime requirements; installed first because its setup.py asks for them while building.
pip_install cloudpickle psutil pyyaml packaging "cffi>=1.4.0"

if [[ -z "$wheel" ]]; then
    mkdir -p "$wheels"
    build_dir="$(mktemp -d)"
    trap 'rm -rf "$build_dir"' EXIT
    # Horovod's CMake hard-sets C++14 but torch's headers need C++20: a compiler that swaps that flag.
    # Only C++14: nvcc also calls it, as host compiler, with -std=c++11, which must match nvcc's own.
    real_cxx="$(command -v "${CXX:-g++}")"
    cat > "$build_dir/c++20" <<EOF
#!/usr/bin/env bash
args=()
for arg in "\$@"; do
    case "\$arg" in -std=c++14|-std=gnu++14) arg=-std=c++20 ;; esac
    args+=("\$arg")
done
exec "$real_cxx" "\${args[@]}"
EOF
    chmod +x "$build_dir/c++20"
    build_env=(
        CXX="$build_dir/c++20"
        HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
        MAKEFLAGS="-j${DLSCALE_BUILD_JOBS:-$(nproc)}"  # setup.py's default -j8 overloads small machines
    )
    if [[ "$build_key" != *-cpu-* ]]; then
        # A CUDA build of torch makes Horovod's CMake insist on a CUDA toolkit, even on a CPU machine.
        cuda_home="${CUDA_HOME:-}"
        if [[ -z "$cuda_home" ]]; then
            for candidate in /usr/local/cuda "$(dirname "$(dirname "$(command -v nvcc || echo /x/x/x)")")"; do
                [[ -x "$candidate/bin/nvcc" && -d "$candidate/include" ]] && { cuda_home="$candidate"; break; }
            done
        fi
        [[ -n "$cuda_home" ]] || { log "torch is a CUDA build: set CUDA_HOME to a CUDA toolkit to build Horovod"; exit 1; }
        build_env+=(CUDA_HOME="$cuda_home" HOROVOD_CUDA_HOME="$cuda_home"
                    HOROVOD_BUILD_CUDA_CC_LIST="${HOROVOD_BUILD_CUDA_CC_LIST:-90}")
    fi
    log "building horovod $horovod_version against $build_key (several minutes; log: $wheels/build.log)"
    started=$SECONDS
    # --no-cache-dir: pip's own wheel cache is keyed by the sdist alone and would hand back a wheel
    # built against another torch.
    if ! env "${build_env[@]}" "$python" -m pip wheel -v --no-deps --no-build-isolation --no-cache-dir \
            -w "$build_dir/out" "horovod==$horovod_version" > "$wheels/build.log" 2>&1; then
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
horovod_works || { log "horovod installed from $wheel but 'import horovod.torch' fails"; exit 1; }
log "horovod $horovod_version ready"
