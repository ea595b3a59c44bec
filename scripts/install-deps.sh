#!/usr/bin/env bash
# Installs what ParaLab needs to build, test and run on Debian 12 or 13 and Ubuntu 22.04 or 24.04
# (on Ubuntu from universe, which a standard install enables), skipping what is already there.
# Usage: scripts/install-deps.sh [--with-torch] [--with-clang]
#   --with-torch  also Debian's PyTorch (python3-torch), for the baseline benchmark
#                 (experiments/baselines/compare_pytorch.py); large, so not installed by default.
#   --with-clang  also clang and its sanitizer and OpenMP runtimes, for the ASan build and the
#                 libFuzzer targets (scripts/sanitize.sh, scripts/fuzz.sh).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above

packages=(
  cmake ninja-build g++ git pkg-config
  libdnnl-dev            # oneDNN: the CPU backend
  ocl-icd-opencl-dev     # OpenCL headers and loader: Debian's dnnl-config.cmake requires them
                         # (oneDNN is built with its OpenCL GPU runtime; the package only Recommends it)
  zlib1g-dev             # Fashion-MNIST .gz files
  nlohmann-json3-dev     # descriptors and results
  libcli11-dev           # bench_runner's command line
  libgtest-dev           # tests
  libbenchmark-dev       # allreduce_bench (Google Benchmark)
  libopenmpi-dev openmpi-bin  # optional: one rank per process under mpirun (the MPI transport)
  python3 python3-jsonschema  # results schema checks in the tests
  python3-matplotlib     # plotting/ (and its tests)
  dataset-fashion-mnist  # the data, in /usr/share/datasets/fashion-mnist
)
for arg in "$@"; do
  case "$arg" in
    --with-torch) packages+=(python3-torch python3-numpy) ;;
    --with-clang) packages+=(clang libclang-rt-dev libomp-dev) ;;  # runtimes of the default clang
    -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --with-torch, --with-clang)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps.sh: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# A package this release does not have (Ubuntu 24.04 has no python3-torch; universe not enabled)
# is named in one line, before anything is installed.
unknown=()
for p in "${missing[@]}"; do
  candidate=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  [[ -n $candidate && $candidate != "(none)" ]] || unknown+=("$p")
done
if ((${#unknown[@]})); then
  hint="on Ubuntu they come from universe"
  [[ " ${unknown[*]} " == *" python3-torch "* ]] &&
    hint+="; where there is no python3-torch (Ubuntu 24.04), install PyTorch with pip and give compare_pytorch.py --python"
  echo "install-deps.sh: not in this system's package sources: ${unknown[*]} ($hint)" >&2
  exit 1
fi
echo "install-deps.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
