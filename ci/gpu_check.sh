#!/usr/bin/env bash
# The GPU check: on a node with GPUs and a CUDA torch where dlscale is importable, the paths no
# CPU machine runs, each kept apart so that one failing still lets the others report:
#   1. the harness's DDP cell against PyTorch's own loop (bench_tests/benchmarks/test_reference_loops.py)
#      on the study's workload (ResNet50, 224 px, 64 images per GPU), NCCL, a GPU per rank, torchrun;
#   2. the scaling suite's DDP cells with the synthetic and the native loader on that workload;
#   3. the parameter-server cells (torch_ps_sync, torch_ps_async: one GPU worker, one CPU server) beside
#      DDP with as many training ranks, under torchrun;
#   4. the unit tests, on a machine where torch sees a GPU.
#   ci/gpu_check.sh OUT_DIR [RANKS, default: the node's GPU count]
# Everything lands in OUT_DIR: one log per part and the suite's results.json.
set -uo pipefail
out="${1:?usage: ci/gpu_check.sh OUT_DIR [RANKS]}"
python="${PYTHON:-python3}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
mkdir -p "$out"
ranks="${2:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}"
if [[ "$ranks" == 0 ]]; then
    echo "gpu_check: torch sees no GPU on $(hostname)" >&2
    exit 2
fi
status=0
part() {  # part NAME COMMAND...: run one part, its output into OUT_DIR/NAME.log
    local name="$1"; shift
    echo "== $name: $*"
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.log"
    echo "== $name exited $rc"
    ((rc == 0)) || status=1
}

{ nvidia-smi -L; "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
"cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name())'; } 2>&1 | tee "$out/machine.log"
rank_list="$(seq -s, 1 "$ranks")"
part reference env DLSCALE_BENCHMARKS=1 DLSCALE_REFERENCE_DEVICE=cuda DLSCALE_REFERENCE_FRAMEWORKS=ddp \
    DLSCALE_REFERENCE_RANKS="$rank_list" "$python" -m pytest bench_tests/benchmarks/test_reference_loops.py \
    -k test_harness_matches_reference_loops -s -p no:cacheprovider
part suite "$python" -m pytest -m scaling --pyargs harness.bench -p no:cacheprovider --launcher torchrun \
    --device cuda --profile study --gpus "$rank_list" --frameworks ddp --loaders synthetic,native \
    --models resnet50 --measure-budget 30 --no-history --results-dir "$out/results" --results-json "$out/results.json"
part parameter_server "$python" -m pytest -m scaling --pyargs harness.bench -p no:cacheprovider --launcher torchrun \
    --device cuda --profile study --gpus 1,2 --frameworks ddp,torch_ps_sync,torch_ps_async --loaders synthetic \
    --models resnet50 --measure-budget 15 --hang-timeout 120 --no-history --results-dir "$out/results" \
    --results-json "$out/parameter_server.json"
part unit timeout 150 "$python" -m pytest bench_tests/unit -q -p no:cacheprovider --timeout 60
exit "$status"
