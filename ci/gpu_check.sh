#!/usr/bin/env bash
# The GPU check: on a node with GPUs and a CUDA torch where dlscale is importable, the paths no
# CPU machine runs, each kept apart so that one failing still lets the others report:
#   1. reference: the harness's DDP cell against PyTorch's own loop (bench_tests/benchmarks/
#      test_reference_loops.py) on the study's workload (ResNet50, 224 px, 64 images per GPU), NCCL,
#      a GPU per rank, torchrun, at fp32 and bf16 (DLSCALE_REFERENCE_DTYPES), two interleaved rounds;
#   2. ddp: the scaling suite's DDP cell with the synthetic loader on that workload, at fp32 (TF32
#      off), tf32 and bf16 (--dtypes);
#   3. ddp_channels_last: DDP's synthetic cell at bf16 with --channels-last;
#   4. deepspeed: DeepSpeed's synthetic cell at bf16 (its own bf16); where `import deepspeed` fails
#      (its wheels not carried) the part says so and is skipped, not failed;
#   5. ddp_native: DDP's cell with the native loader (JPEG decoding in DataLoader workers) at bf16;
#   6. parameter_server: the parameter-server cells (torch_ps_sync, torch_ps_async: one GPU worker,
#      one CPU server), fp32, measured once and judged against the system's baselines (DDP with as
#      many training ranks is part 2's ddp-synthetic-resnet50-g<N>);
#   7. unit: the unit tests, on a machine where torch sees a GPU (last: it gets what is left).
# Two more parts run only where GPU_CHECK_PARTS names them: an A/B in one session (--against, 6
# pairs of launches of DDP's synthetic cell on one GPU) through NCCL and torchrun:
#   ab_regression: the current side slowed by a launch variable users meet (NVIDIA_TF32_OVERRIDE=0:
#      cuBLAS and cuDNN refuse TF32, on the tf32 cell; with --cpu ATEN_CPU_CAPABILITY=default, ATen
#      without vector kernels, on fp32), the reference without it: the part expects `regressed`;
#   ab_same: bf16 (fp32 with --cpu) against a reference that differs only in a variable no rank reads:
#      the part expects `same` or `inconclusive`, never `regressed` or `improved`.
#   Each takes 5-7 minutes on one GPU: one a call (GPU_CHECK_PARTS=ab_same GPU_CHECK_BUDGET_S=560). An
#   A/B cut short by the budget keeps and judges the pairs it measured.
# On a node without network whose image has torch but not all of dlscale's dependencies (the lent
# H200s lack google-crc32c, arch and ruptures), carry them as wheels in .whl/ (ignored by git; the
# device tool's carry: [".whl"]): the check installs them for itself, and where they are missing
# it stops at once, naming the command that downloads them for the node's Python, e.g. for 3.12:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .whl google-crc32c arch ruptures
# A checkout without `pip install` gets the suite's plugin from the source tree.
# Parts 2-5 record their cells into baselines/<system>.json (--update-baselines --cell-repeats 3: a band
# from three launches, the provenance the suite records), <system> named from the GPU
# (torch.cuda.get_device_name(): h100-sxm, h100-pcie, h200-sxm, a100-sxm, ...; GPU_CHECK_SYSTEM
# overrides it).
#
#   ci/gpu_check.sh OUT_DIR [RANKS, default: the node's GPU count] [--cpu]
#
# --cpu runs the same parts on this machine's CPU with tiny settings, to check the script end to end
# before GPU minutes are spent: 1 rank, 32 px, 8 images, 2 + 5 steps, fp32 and bf16 only (tf32 and
# fp16 are GPU arithmetic), the suite's parts on ResNet20 (bf16 ResNet50 takes tens of seconds a
# step on a CPU without AVX-512 BF16; the reference part keeps ResNet50, one round, 1 + 3 steps), and
# the baselines written into OUT_DIR/baselines, never the repository's.
#
# The check keeps to a budget (GPU_CHECK_BUDGET_S, default 690 s on GPUs, 1800 s with --cpu),
# counted from its start: each part may use what is left of it less what the parts after it are
# expected to need (NEED below), and is then ended as a Ctrl-C ends the suite (SIGTERM: the cells it
# finished, and their baselines, are kept) and reported as out of time. GPU_CHECK_PARTS (comma-separated names) runs only those parts.
# Everything lands in OUT_DIR: machine.log, one log per part, each suite part's results as
# <part>.json, a copy of the baselines it recorded and their package sets under OUT_DIR/baselines
# (the one folder to bring back from a lent machine), and a summary of the parts at the end. PYTHON names the interpreter (default: the
# repository's .venv where there is one, else python3).
set -uo pipefail
cpu=0
positional=()
for arg in "$@"; do
    if [[ "$arg" == --cpu ]]; then cpu=1; else positional+=("$arg"); fi
done
out="${positional[0]:?usage: ci/gpu_check.sh OUT_DIR [RANKS] [--cpu]}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$repo/.venv/bin/python" ]]; then python="${PYTHON:-$repo/.venv/bin/python}"; else python="${PYTHON:-python3}"; fi
cd "$repo"
mkdir -p "$out"
out="$(cd "$out" && pwd)"  # the suite's options want it absolute (--option=PATH)

if ((cpu)); then
    ranks="${positional[1]:-1}"
    device=cpu
    system="${GPU_CHECK_SYSTEM:-cpu-check}"
    baselines="$out/baselines"
    mkdir -p "$baselines"
    dtypes=fp32,bf16
    reference_dtypes=fp32,bf16
    budget="${GPU_CHECK_BUDGET_S:-1800}"
    workload=(--workload-profile cpu-small --image-size 32 --batch-size 8 --warmup-steps 2 --steps 5 --num-workers 1
              --models resnet20)
    # the plumbing only: one round of three steps holds no harness/reference ratio worth a verdict
    reference_env=(DLSCALE_REFERENCE_ROUNDS=1 DLSCALE_REFERENCE_WORKLOAD=batch_size=8,warmup_steps=1,steps=3
                   DLSCALE_REFERENCE_MIN_RATIO=0)
    ab_slower=ATEN_CPU_CAPABILITY=default ab_slower_dtype=fp32 ab_same_dtype=fp32
    declare -A NEED=([reference]=300 [ddp]=300 [ddp_channels_last]=120 [deepspeed]=150 [ddp_native]=120
                     [parameter_server]=150 [ab_regression]=300 [ab_same]=300 [unit]=570)
else
    ranks="${positional[1]:-$("$python" -c 'import torch; print(torch.cuda.device_count())')}"
    if [[ "$ranks" == 0 ]]; then
        echo "gpu_check: torch sees no GPU on $(hostname) (ci/gpu_check.sh OUT_DIR --cpu checks the script on a CPU)" >&2
        exit 2
    fi
    device=cuda
    # the GPU's model and form factor, e.g. "NVIDIA H100 80GB HBM3" -> h100-sxm, "NVIDIA H100 PCIe" -> h100-pcie
    system="${GPU_CHECK_SYSTEM:-$("$python" - <<'EOF'
import re
import torch
name = torch.cuda.get_device_name().lower()
words = re.sub(r"^(nvidia|tesla)\s+", "", name)
model = re.split(r"[\s_-]+", words)[0]
if not re.fullmatch(r"[a-z]+\d+[a-z]*", model):  # not a data-centre part's name (a GeForce, a Quadro): all of it
    print(re.sub(r"[^a-z0-9]+", "-", words).strip("-"))
else:
    form = next((f for f in ("pcie", "nvl", "sxm") if f in name), None)
    if form is None and (re.search(r"\bhbm3e?\b", name) or model in ("h200", "b200", "b100")):
        form = "sxm"  # NVIDIA names the SXM parts by their memory: "H100 80GB HBM3", "H200"
    print(f"{model}-{form}" if form else model)
EOF
)}"
    baselines="$repo/baselines"
    dtypes=fp32,tf32,bf16
    reference_dtypes=fp32,bf16
    budget="${GPU_CHECK_BUDGET_S:-690}"
    workload=(--workload-profile study --models resnet50)
    reference_env=(DLSCALE_REFERENCE_DEVICE=cuda DLSCALE_REFERENCE_ROUNDS=2)
    # seconds each part took on one H200 (2026-11-27, torch 2.11): a launch 15-22 s whatever its
    # dtype, of which the 60 measured steps are 2-4 s (start-up: torchrun, CUDA, NCCL, cuDNN's
    # autotuning); reference 141 s for its 8 launches, ddp 188 s for 9, deepspeed 22 s a launch, a
    # parameter-server cell 37 s, the unit tests about 60 s. A whole check fills about 11.5 min of a
    # 15-min lease with the machine's start; a part that ran out keeps the cells it finished, and
    # GPU_CHECK_PARTS reruns the rest.
    ab_slower=NVIDIA_TF32_OVERRIDE=0 ab_slower_dtype=tf32 ab_same_dtype=bf16
    # the A/B parts, 12 launches each: on one H200 (2026-11-28) bf16's launches took about 21 s
    # (11 in 230 s), the TF32-refused ones longer (6 in 262 s, as the progress lines showed them);
    # together they need more than one 10-minute call of a lent machine: one part a call
    declare -A NEED=([reference]=145 [ddp]=195 [ddp_channels_last]=65 [deepspeed]=75 [ddp_native]=70
                     [parameter_server]=80 [ab_regression]=400 [ab_same]=280 [unit]=60)
fi
ORDER=(reference ddp ddp_channels_last deepspeed ddp_native parameter_server ab_regression ab_same unit)
DEFAULT_PARTS=(reference ddp ddp_channels_last deepspeed ddp_native parameter_server unit)
chosen=",${GPU_CHECK_PARTS:-$(IFS=,; echo "${DEFAULT_PARTS[*]}")},"
for name in ${GPU_CHECK_PARTS:+${GPU_CHECK_PARTS//,/ }}; do
    [[ -v "NEED[$name]" ]] || { echo "gpu_check: no part $name; the parts: ${ORDER[*]}" >&2; exit 2; }
done
rank_list="$(seq -s, 1 "$ranks")"
deadline=$budget  # from the script's start: $SECONDS counts from there
status=0
summary=()

needed_after() {  # seconds the chosen parts after NAME are expected to take
    local name="$1" after=0 total=0 part
    for part in "${ORDER[@]}"; do
        if ((after)) && [[ "$chosen" == *",$part,"* ]]; then total=$((total + NEED[$part])); fi
        [[ "$part" == "$name" ]] && after=1
    done
    echo "$total"
}
part() {  # part NAME COMMAND...: run one part within its share of the budget, its output into OUT_DIR/NAME.log
    local name="$1"; shift
    [[ "$chosen" == *",$name,"* ]] || return 0
    local cap=$((deadline - SECONDS - $(needed_after "$name")))
    if ((cap < 30)); then
        echo "== $name: not run: ${cap}s left of the check's ${budget}s for it" | tee "$out/$name.log"
        summary+=("$name: not run, out of time")
        status=1
        return
    fi
    echo "== $name (at most ${cap}s): $*"
    local started=$SECONDS
    timeout -k 10 $((cap - 10)) "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.log"
    if ((rc == 124 || rc == 137)); then
        echo "== $name ran out of its ${cap}s (exit $rc): the cells it finished are kept" | tee -a "$out/$name.log"
    else
        echo "== $name exited $rc"
    fi
    summary+=("$name: exit $rc after $((SECONDS - started))s")
    ((rc == 0)) || status=1
}
expect_paired() {  # expect_paired NAME VERDICT...: the A/B verdict in OUT_DIR/NAME.json is one of VERDICT...
    [[ "$chosen" == *",$1,"* ]] || return 0
    local name="$1"; shift
    if [[ ! -f "$out/$name.json" ]]; then
        summary+=("$name: no A/B verdict (no $out/$name.json)")
        status=1
        return
    fi
    local said
    said="$("$python" -c 'import json, sys
cells = json.load(open(sys.argv[1]))["paired_cells"]
print(" ".join(c["verdict"] for c in cells) or "none")' "$out/$name.json")"
    local verdict
    for verdict in $said; do
        if [[ " $* " != *" $verdict "* ]]; then
            summary+=("$name: A/B verdict $said, expected one of: $*")
            status=1
            return
        fi
    done
    summary+=("$name: A/B verdict $said, as expected")
}
skip() {  # skip NAME REASON: a part that cannot run here, said so, not failed
    [[ "$chosen" == *",$1,"* ]] || return 0
    echo "== $1: skipped: $2" | tee "$out/$1.log"
    summary+=("$1: skipped ($2)")
}

{
    if ((cpu)); then
        echo "gpu_check --cpu on $(hostname): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    else
        nvidia-smi -L
    fi
    "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
"cuDNN", torch.backends.cudnn.version(), torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'
    echo "system $system (baselines: $baselines/$system.json), ranks $rank_list, budget ${budget}s"
    git -C "$repo" rev-parse HEAD 2>/dev/null && git -C "$repo" status --short ||
        echo "no git checkout here: the baselines' provenance will have no git commit"
} 2>&1 | tee "$out/machine.log"

# dlscale's dependencies (pyproject.toml's) that the node's Python lacks: what a bare torch image
# lacks comes from the wheels carried in .whl/, installed into a folder of this check's alone
missing_distributions() {
    "$python" - "$repo/pyproject.toml" <<'EOF'
import importlib.metadata, re, sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: not checked here, the parts say what fails to import
    sys.exit()
with open(sys.argv[1], "rb") as file:
    requirements = tomllib.load(file)["project"]["dependencies"]
def installed(name):
    try:
        return bool(importlib.metadata.distribution(name))
    except importlib.metadata.PackageNotFoundError:
        return False
names = (re.match(r"[A-Za-z0-9._-]+", requirement).group() for requirement in requirements)
print(" ".join(name for name in names if not installed(name)))
EOF
}
absent="$(missing_distributions)"
if [[ -n "$absent" ]] && compgen -G "$repo/.whl/*.whl" > /dev/null; then
    site="$(mktemp -d)"
    trap 'rm -rf "$site"' EXIT
    echo "gpu_check: $absent not installed: installing the wheels in $repo/.whl for this check"
    "$python" -m pip install --quiet --no-index --no-deps --target "$site" "$repo"/.whl/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    absent="$(missing_distributions)"
fi
if [[ -n "$absent" ]]; then
    version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    echo "gpu_check: dlscale's dependencies $absent are not installed for $python, and no wheel in" \
        "$repo/.whl provides them; where a package index is reachable, with this node's Python $version:" >&2
    echo "  pip download --no-deps --only-binary=:all: --python-version $version" \
        "--platform manylinux2014_x86_64 -d .whl $absent" >&2
    exit 2
fi

# a checkout copied onto a node without `pip install`: the suite's plugin from the source tree
if ! "$python" -c 'import importlib.metadata as m, sys
sys.exit(not any(e.name == "dlscale" for e in m.entry_points(group="pytest11")))'; then
    export PYTEST_PLUGINS=harness.plugin
fi
suite=("$python" -m pytest -m scaling --pyargs harness.bench -p no:cacheprovider --launcher torchrun
       --rank-device "$device" "${workload[@]}" --no-history --results-dir="$out/results")
record=(--update-baselines --cell-repeats 3 --measure-budget 0 --system "$system" --baselines-dir="$baselines")

part reference env DLSCALE_BENCHMARKS=1 DLSCALE_REFERENCE_FRAMEWORKS=ddp DLSCALE_REFERENCE_RANKS="$rank_list" \
    DLSCALE_REFERENCE_DTYPES="$reference_dtypes" "${reference_env[@]}" \
    "$python" -m pytest bench_tests/benchmarks/test_reference_loops.py -k test_harness_matches_reference_loops \
    -s -p no:cacheprovider
part ddp "${suite[@]}" "${record[@]}" --gpus "$rank_list" --frameworks ddp --loaders synthetic \
    --dtypes "$dtypes" --results-json="$out/ddp.json"
part ddp_channels_last "${suite[@]}" "${record[@]}" --gpus "$rank_list" --frameworks ddp --loaders synthetic \
    --dtypes bf16 --channels-last --results-json="$out/ddp_channels_last.json"
if [[ "$chosen" != *",deepspeed,"* ]] || missing="$("$python" -c 'import deepspeed' 2>&1 >/dev/null)"; then
    part deepspeed "${suite[@]}" "${record[@]}" --gpus "$rank_list" --frameworks deepspeed --loaders synthetic \
        --dtypes bf16 --results-json="$out/deepspeed.json"
else
    skip deepspeed "import deepspeed fails here: $(tail -n 1 <<<"$missing")"
fi
part ddp_native "${suite[@]}" "${record[@]}" --gpus "$rank_list" --frameworks ddp --loaders native \
    --dtypes bf16 --results-json="$out/ddp_native.json"
part parameter_server "${suite[@]}" --gpus 2 --frameworks torch_ps_sync,torch_ps_async --loaders synthetic \
    --measure-budget 0 --hang-timeout 120 --system "$system" --baselines-dir="$baselines" \
    --results-json="$out/parameter_server.json"
paired=(--gpus 1 --frameworks ddp --loaders synthetic --pairs 6 --max-pairs 6 --system "$system"
        --baselines-dir="$baselines")
# pytest exits 1 where the A/B says regressed (its test fails): expect_paired judges the verdict
part ab_regression bash -c '"$@"; (($? <= 1))' ab_regression "${suite[@]}" "${paired[@]}" \
    --dtypes "$ab_slower_dtype" --launch-env "$ab_slower" --against "env:${ab_slower%%=*}" \
    --results-json="$out/ab_regression.json"
expect_paired ab_regression regressed
part ab_same "${suite[@]}" "${paired[@]}" --dtypes "$ab_same_dtype" --against env:DLSCALE_GPU_CHECK_SIDE=reference \
    --results-json="$out/ab_same.json"
expect_paired ab_same same inconclusive
# -v: each test's name as it ends, so a part cut short still says which tests failed
part unit "$python" -m pytest bench_tests/unit -v -rfE --tb=short -p no:cacheprovider --timeout 60

if [[ "$baselines" != "$out/baselines" && -f "$baselines/$system.json" ]]; then
    mkdir -p "$out/baselines"
    cp "$baselines/$system.json" "$out/baselines/"
    [[ -d "$baselines/environments" ]] && cp -r "$baselines/environments" "$out/baselines/"
fi

echo "== gpu_check ($system, $((SECONDS))s of ${budget}s):"
printf '   %s\n' "${summary[@]}"
exit "$status"
