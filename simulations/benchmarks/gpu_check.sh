#!/usr/bin/env bash
# fedpub's GPU checks in one call on a machine with a CUDA GPU: the environment, the tests that skip without CUDA,
# the throughput benchmark's GPU table (issue 7: --device cuda --cohorts 100), and the quick start run on the GPU in one
# process and as one torchrun rank (NCCL), the two models and ledgers compared (issue 35). Run from the repository root:
#
#     bash simulations/benchmarks/gpu_check.sh            # logs and tables under $OUT (default runs/gpu_check)
#
# Packages the machine lacks travel as wheels in .whl/ (ignored; the lent machines' image lacked, on 2026-11-27:
# flwr and what it imports (pycryptodome, cryptography, cffi, pycparser, iterators, fastapi, starlette, sqlalchemy,
# greenlet, alembic, mako, tomli, tomli-w), dp-accounting, pydantic, pydantic-core, typer, click, typing-extensions,
# typing-inspection and annotated-types, each at the version .venv holds): when that folder exists they are installed into
# $SITE and put first on every Python's path (a .pth in the interpreter's site-packages, since the tests' own
# subprocesses set PYTHONPATH to the repository alone). fedpub runs from the source tree. A rehearsal on a CPU:
#     PYTHON=.venv/bin/python WHEELS=none DEVICE=cpu COHORTS=10 ROUNDS=3 TASKS=emnist_mlp OUT=/tmp/gpu_check \
#         bash simulations/benchmarks/gpu_check.sh
set -u -o pipefail
OUT=${OUT:-runs/gpu_check}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
DEVICE=${DEVICE:-cuda}
COHORTS=${COHORTS:-100}
ROUNDS=${ROUNDS:-6}
TASKS=${TASKS:-emnist_cnn,emnist_mlp,so_logreg}
TEST_TIMEOUT=${TEST_TIMEOUT:-150}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-230}  # 0: no throughput table
RANKS_TIMEOUT=${RANKS_TIMEOUT:-150}  # 0: no quick-start comparison
RANKS_ROUNDS=${RANKS_ROUNDS:-4}
RANKS_DIR=${RANKS_DIR:-$OUT/ranks}  # the two run directories and their data
TESTS=(tests/clients/test_device.py tests/steps/test_gaussian_noise.py tests/steps/test_tree_noise.py
       tests/simulations/test_run_directory_safety.py
       tests/simulations/test_distributed.py::test_an_nccl_rank_on_a_gpu_releases_what_one_process_on_it_releases_for_every_recipe)
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$OUT"
started=$SECONDS

if [ -d "$WHEELS" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
        || { echo "wheel install failed"; exit 1; }
    purelib=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if ! echo "import sys; sys.path.insert(0, '$SITE')" > "$purelib/00_gpu_check_site.pth"; then
        echo "cannot write $purelib/00_gpu_check_site.pth: only PYTHONPATH holds $SITE (the tests' subprocesses lack it)"
        export PYTHONPATH=$SITE:.
    fi
fi
export PYTHONPATH=${PYTHONPATH:-.}

echo "== environment" | tee "$OUT/env.txt"
{
    nvidia-smi -L || echo "no nvidia-smi"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
    "$PY" - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
import importlib.metadata as md
for name in ("dp-accounting", "pydantic", "pydantic-core", "typing-extensions", "typer", "click", "numpy", "scipy",
             "attrs", "absl-py", "h5py", "pytest", "hypothesis"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} MISSING")
import fedpub, dp_accounting, pydantic
print("fedpub from", fedpub.__file__)
EOF
} 2>&1 | tee -a "$OUT/env.txt"

echo "== tests that need CUDA ($(( SECONDS - started )) s)" | tee "$OUT/tests.txt"
timeout "$TEST_TIMEOUT" "$PY" -m pytest -q -rs -p no:cacheprovider --durations=8 "${TESTS[@]}" 2>&1 | tee -a "$OUT/tests.txt"
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/tests.txt"

if [ "$BENCH_TIMEOUT" != 0 ]; then
    echo "== throughput, --device $DEVICE ($(( SECONDS - started )) s)" | tee "$OUT/throughput_log.txt"
    timeout "$BENCH_TIMEOUT" "$PY" -m fedpub.simulations.benchmarks.throughput --device "$DEVICE" --tasks "$TASKS" \
        --cohorts "$COHORTS" --rounds "$ROUNDS" --flower-max-gb 0 --out "$OUT/throughput" 2>&1 \
        | tee -a "$OUT/throughput_log.txt" | grep -v "^[a-z_]* cohort [0-9]* fedpub"
    rc=${PIPESTATUS[0]}
    echo "throughput rc=$rc ($(( SECONDS - started )) s)" | tee -a "$OUT/throughput_log.txt"
    if [ "$rc" != 0 ]; then  # cut short: the cells measured so far (the benchmark writes its table after every cell)
        if [ -f "$OUT/throughput/throughput.md" ]; then cat "$OUT/throughput/throughput.md"; else echo "no throughput.md"; fi
    fi
fi

if [ "$RANKS_TIMEOUT" != 0 ]; then
    echo "== the quick start on $DEVICE, $RANKS_ROUNDS rounds: one process, then one torchrun rank ($(( SECONDS - started )) s)" \
        | tee "$OUT/ranks.txt"
    run_args=(simulations/configs/quickstart.yaml --fresh --set "rounds=$RANKS_ROUNDS" --set eval_every=2
              --set checkpoint_every=2 --set "device=$DEVICE" --set "data.path=$RANKS_DIR/data" --set name=quick)
    timeout "$RANKS_TIMEOUT" "$PY" -m fedpub.simulations run "${run_args[@]}" --set "output_dir=$RANKS_DIR/one_process" 2>&1 | tee -a "$OUT/ranks.txt"
    echo "one process rc=${PIPESTATUS[0]} ($(( SECONDS - started )) s)" | tee -a "$OUT/ranks.txt"
    timeout "$RANKS_TIMEOUT" "$PY" -m torch.distributed.run --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 29517 \
        -m fedpub.simulations run "${run_args[@]}" --set "output_dir=$RANKS_DIR/one_rank" 2>&1 | tee -a "$OUT/ranks.txt"
    echo "one rank rc=${PIPESTATUS[0]} ($(( SECONDS - started )) s)" | tee -a "$OUT/ranks.txt"
    "$PY" - "$RANKS_DIR" <<'EOF' 2>&1 | tee -a "$OUT/ranks.txt"
import json, sys
from pathlib import Path
import torch
root = Path(sys.argv[1])
names = ("one_process", "one_rank")
runs = {name: torch.load(root / name / "quick" / "checkpoint.pt", weights_only=False) for name in names}
a, b = (runs[name]["params"] for name in names)
gap = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
ledgers = [json.loads((root / name / "quick" / "ledger.json").read_text()) for name in names]
finals = [json.loads((root / name / "quick" / "final_metrics.json").read_text()) for name in names]
print("rounds", [runs[name]["rounds_done"] for name in names], "max |model difference|", f"{gap:.3g}")
print("ledgers equal", ledgers[0] == ledgers[1], "final metrics", finals)
EOF
fi
echo "done ($(( SECONDS - started )) s)"
