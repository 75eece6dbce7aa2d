#!/usr/bin/env bash
# Everything that needs a GPU, in one run on a machine with one: the GPU tests, then the CUDA
# benchmarks, each step under its own time limit so that one hang or slow step leaves the others
# their time. Each step's output goes to $OUT/<step>.log; a summary of every step (its exit status,
# seconds and the end of its log) is printed last.
#
#     OUT=/tmp/gpu benchmarks/gpu_checks.sh [step[:seconds] ...]
#
# Steps: info tests kernels rows mma splitk products symbolic attention tile tilemm launch compare graphs tune decode
# (default: all, with the limits below; info: the GPU, torch and `ember doctor`, whose "GPU facts" line
# says whether the device's match ember.target.ARCHS' row for its architecture; rows: the row kernels (softmax, layer norm, RMS norm) at
# 4096x4096, 4096x768 and 128x768, their default schedules and variants, and the elementwise chain,
# against torch and the device copy of each shape; mma: mma.sync's GEMMs 512^3 with rows of 128,
# 256 and 512 bytes checked against torch first (a line each: right or WRONG), then the Tensor
# Core GEMM's configurations (mma.sync at 128x128, 128x256, 256x128 and 128x64 tiles, wmma's
# 128x128) at 4096^3 fp16 and bf16 against cuBLAS and Triton, the best of each intrinsic printed
# with its share of cuBLAS;
# splitk: split-K against one pass per layer shape and count of parts, to set its thresholds;
# products: ResNet-18's convolutions and BERT-base's linear layers at batch 1 in fp16, each under
# the rules and 5-8 alternative tiles, warps, stages and parts, next to cuDNN/cuBLAS, the best per shape
# marked and the product_choices entries that would apply it printed as each shape is measured
# (the 5 shapes of each model with the most time by default; PRODUCTS= passes other arguments:
# "--shapes 11" for all, "--only conv"); each convolution in NCHW and channels-last (conv2d_nhwc_gemm:
# a tap's channels gathered 16 bytes at a time), each checked against torch first (a failure prints
# the configuration's traceback), beside cuDNN on channels_last tensors, and "NHWC / NCHW" per shape:
# channels_last is the default of every GPU precision (GPU_PRECISIONS); where that ratio is above 1 on
# the costliest shapes (the deep 3x3 ones) and compare's "ember" row is slower than "ember, NCHW",
# take channels_last out of GPU_PRECISIONS; first (--epilogues, 3 shapes of each model's and a 4096^3 fp16
# linear layer beside cuBLAS) only the rules in both epilogues, from the lanes' fragments (the default,
# ember.cuda.fragment_epilogue) and through a float tile in shared memory (fragment_stores False), then
# the verdict: both summed, any WRONG, which to make tensorcore_product's default; the sweep after
# times both epilogues again beside the other configurations;
# launch: the host's time per launch of ember.triton's vector add and softmax against Triton's
# and torch's, an ember.build kernel and a CUDAModel call, issued back to back and waited for alone;
# symbolic: fp16 Tensor Core products and causal flash attention built for symbolic tokens against
# static ones; attention: flash attention on mma.sync (scores in registers), fp16 and bf16, static,
# symbolic, on a packed QKV buffer, in other warps and tiles of keys (the warps unfold_attention
# picks for the GPU printed; 4 warps, the default before it, and each with and without launch
# bounds: the kernel before them), and the wmma kernel before it,
# each against torch's scaled_dot_product_attention, with the % of its speed and the best;
# tilemm: ember.triton's matmul with tl.dot on mma.sync (c stored from the lanes' fragments, and
# through a float block in shared memory as before: EMBER_TILE_FRAGMENT_STORES=0) and on wmma, every
# configuration checked against torch first (fp16, bf16, odd sizes: right or WRONG), then timed at
# 4096^3 fp16 beside Triton at the tutorial's autotuning configurations and cuBLAS, the best of each
# lowering with its % of Triton's and the fragment stores' gain per configuration; where one is
# WRONG it says which option falls back);
# MODELS= names the zoo models
# of `compare`, PARTS= the parts of `kernels` (default: all but attention and rows), DECODE= the
# sizes of `decode` (default: the reduced GPT-2,
# "--contexts 128" for the full one), PRECISIONS= those of `compare` (default: fp32 fp16).
# Step profile (after compare): where resnet18's and bert_base's time goes, every kernel's time (up to 30),
# share, grid and bound, and each model without split_k beside; PROFILE_MODELS= names other
# models, PRECISIONS= its precisions too.
# Run from the repository root with the python3 that holds torch with CUDA (PYTHON= to name
# another); the tree is imported from here (PYTHONPATH), and wheels in .whl/ (xgboost for the
# tuner's cost model, say) are installed into a temporary folder first.
set -u
OUT=${OUT:-/tmp/gpu_checks}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/gpu_site"
fi

declare -A LIMIT=([info]=30 [tests]=150 [kernels]=100 [rows]=60 [mma]=60 [splitk]=120 [products]=180 [symbolic]=80
                  [attention]=80 [tile]=70 [tilemm]=90 [launch]=60 [compare]=180 [profile]=90 [graphs]=50 [tune]=90
                  [decode]=60)
ORDER=(info tests kernels rows mma splitk products symbolic attention tile tilemm launch compare profile graphs tune
       decode)

run_step() {
    case $1 in
        info) nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
              "$PY" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
              "$PY" -m ember.cli doctor ;;
        tests) "$PY" -m pytest tests/cuda tests/tile/test_cuda.py tests/tune/test_gpu_tuning.py -n 12 -q \
                   -p no:cacheprovider --timeout 100 -rfEs --durations=10 ;;
        kernels) "$PY" benchmarks/cuda_kernels.py --runs 20 ${PARTS:+--parts $PARTS} ;;
        rows) "$PY" benchmarks/cuda_kernels.py --runs 20 --parts rows elementwise ;;
        mma) "$PY" benchmarks/cuda_kernels.py --runs 20 --parts tensorcore_gemm ;;
        splitk) "$PY" benchmarks/split_k_sweep.py --runs 20 ;;
        products) "$PY" benchmarks/product_configs.py --runs 20 --epilogues --shapes 3 ${PRODUCTS:-}
                  "$PY" benchmarks/product_configs.py --runs 20 --shapes 5 ${PRODUCTS:-} ;;
        symbolic) "$PY" benchmarks/symbolic_tensor_cores.py --runs 20 ;;
        attention) "$PY" benchmarks/cuda_kernels.py --parts attention --runs 20 ;;
        tile) "$PY" benchmarks/tile.py --device cuda --reps 30 ;;
        tilemm) "$PY" benchmarks/tile_matmul.py --reps 20 ;;
        launch) "$PY" benchmarks/launch_host.py --gpu --launches 2000 ;;
        compare) "$PY" benchmarks/compare.py --device cuda --models ${MODELS:-resnet18 mobilenet_v2 bert_base gpt2_small} \
                     --runs 30 --peers reduce-overhead ${PRECISIONS:+--gpu-precisions $PRECISIONS} ;;
        profile) "$PY" benchmarks/gpu_profile.py --models ${PROFILE_MODELS:-resnet18 bert_base} \
                     ${PRECISIONS:+--precisions $PRECISIONS} --top 30 ;;
        graphs) "$PY" benchmarks/cuda_graphs.py --models resnet18 mobilenet_v2 mlp --runs 30 --no-torch-compile ;;
        tune) "$PY" benchmarks/cuda_kernels.py --tune 64 ;;
        decode) "$PY" benchmarks/decode.py --device cuda --models gpt2 ${DECODE:---small --contexts 64 --tokens 16} ;;
        *) echo "unknown step $1"; return 2 ;;
    esac
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=("${ORDER[@]}")
summary=()
for spec in "${steps[@]}"; do
    name=${spec%%:*}
    limit=${LIMIT[$name]:-60}
    [ "$spec" != "$name" ] && limit=${spec#*:}
    echo "== $name: limit ${limit} s, started $(date -u +%T)"
    start=$(date +%s)
    timeout -k 5 "$limit" bash -c "$(declare -f run_step); PY='$PY'; run_step $name" > "$OUT/$name.log" 2>&1
    rc=$?
    summary+=("$name: rc=$rc after $(( $(date +%s) - start )) s")
    tail -n 40 "$OUT/$name.log"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
