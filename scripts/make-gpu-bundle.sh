#!/usr/bin/env bash
# Packs what an offline GPU host lacks into gpu-bundle/ (gitignored; carried to the device
# machine with the working tree): the headers and static libraries of ParaLab's non-CUDA
# dependencies (nlohmann-json, CLI11, GoogleTest, Google Benchmark, zlib) and the Fashion-MNIST
# files. scripts/gpu-check.sh builds a CUDA-only ParaLab there from it (no oneDNN: the CPU
# backend's 40 MB library would not fit beside the data). Run scripts/install-deps.sh first.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
(($# == 0)) || { echo "make-gpu-bundle.sh: unknown argument '$1' (it takes none; see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
out=gpu-bundle
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
for f in {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; do
  [[ -f $data/$f ]] || { echo "make-gpu-bundle.sh: $data/$f missing (apt-get install dataset-fashion-mnist, or set FASHION_MNIST_DIR)" >&2; exit 1; }
done
# Built in gpu-bundle.tmp and renamed when whole; a failure on the way removes it.
rm -rf "$out.tmp"
trap 'rm -rf "$out.tmp"' EXIT
mkdir -p "$out.tmp/include" "$out.tmp/lib" "$out.tmp/data/fashion-mnist"
for d in nlohmann CLI gtest benchmark; do
  [[ -d /usr/include/$d ]] || { echo "make-gpu-bundle.sh: /usr/include/$d missing (run scripts/install-deps.sh)" >&2; exit 1; }
  cp -r "/usr/include/$d" "$out.tmp/include/"
done
cp /usr/include/zlib.h /usr/include/zconf.h "$out.tmp/include/"
# NCCL's header, for GPU hosts whose NCCL (a Python wheel) comes without one.
for nccl_h in /usr/local/cuda/include/nccl.h /usr/include/nccl.h; do
  if [[ -f $nccl_h ]]; then
    mkdir -p "$out.tmp/include/nccl"
    cp "$nccl_h" "$out.tmp/include/nccl/"
    break
  fi
done
# Debian ships Google Benchmark as a shared library only: its runtime file goes along (under its
# soname, no symlinks), and gpu-check.sh puts gpu-bundle/lib on LD_LIBRARY_PATH.
bench_soname=$(objdump -p "$libdir/libbenchmark.so" 2>/dev/null | awk '/SONAME/ {print $2}')
for l in libz.a libgtest.a libgtest_main.a "${bench_soname:-libbenchmark.so}"; do
  [[ -f $libdir/$l ]] || { echo "make-gpu-bundle.sh: $libdir/$l missing" >&2; exit 1; }
  cp -L "$libdir/$l" "$out.tmp/lib/"
done
cp "$data"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$out.tmp/data/fashion-mnist/"
rm -rf "$out"
mv "$out.tmp" "$out"
du -sh "$out"
