#!/usr/bin/env bash
# qconv_paths.sh — device time and TOP/s of each kiln.QConv path (quant_conv_im2col.cu) on the
# ResNet-50 layer shapes of test_backend_ops --perf (batch 256 and batch 1, channels-last and NCHW),
# one table per path, forced with KILN_CUDA_QCONV_PATH: 0 the default, 1 float16 (cuDNN), 2..5 the
# implicit-GEMM kernel on 128x128, 64x64, 128x256 and 32x64 tiles, 6 the fused cuBLASLt GEMM, 7 the
# 64x64 tile with split-K. A path a layer does not take runs the default there (so compare a row with path 0's before crediting it).
# The timed runs move no data over PCIe (--perf's default). One layer alone: SHAPE='i8[256,56,56,64]'.
#
#   bench/qconv_paths.sh                 # BIN=build-gpu/tests/gpu/test_backend_ops PATHS="0 2 6" SHAPE=...
set -euo pipefail

BIN=${BIN:-build-gpu/tests/gpu/test_backend_ops}
PATHS=${PATHS:-0 1 2 3 4 5 6 7}
shape=()
if [ -n "${SHAPE:-}" ]; then shape=(--shape "$SHAPE"); fi

for p in $PATHS; do
    echo "== kiln.QConv path $p"
    KILN_CUDA_QCONV_PATH=$p "$BIN" --perf --op kiln.QConv --dtype f32 --iters 20 "${shape[@]}" | grep -E '^(perf|FAIL|UNSUPPORTED)'
done
