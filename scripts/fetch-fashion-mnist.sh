#!/usr/bin/env bash
# Downloads the four Fashion-MNIST files into a directory (default ./data/fashion-mnist) and checks
# them against the MD5 sums published in the data set's README
# (https://github.com/zalandoresearch/fashion-mnist#get-the-data).
#
# Usage: scripts/fetch-fashion-mnist.sh [TARGET_DIR]
#
# Files already present with the right sum are skipped, so rerunning is cheap. Each download goes
# to a temporary file that is renamed only once its sum is right; a wrong sum deletes it and exits
# non-zero. Sources, tried in order: $FASHION_MNIST_MIRROR if set (a base URL holding the four
# files, e.g. an internal mirror), the S3 bucket the README links to, then the GitHub repository.
# Without a network use `apt-get install dataset-fashion-mnist` (/usr/share/datasets/fashion-mnist)
# instead. Its .gz files hold the very deflate streams of the upstream ones, but Debian rewrote the
# gzip headers (original file name dropped, new mtime), so their MD5s differ from the sums below
# and this script would fetch them again: point the program at that directory, don't copy them here.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above

(($# <= 1)) || { echo "fetch-fashion-mnist.sh: one TARGET_DIR at most, got $# arguments (see --help)" >&2; exit 2; }
[[ ${1:-} != -* ]] || { echo "fetch-fashion-mnist.sh: unknown option '$1' (usage: scripts/fetch-fashion-mnist.sh [TARGET_DIR]; --help)" >&2; exit 2; }
readonly target="${1:-./data/fashion-mnist}"
readonly mirrors=(
  ${FASHION_MNIST_MIRROR:+"$FASHION_MNIST_MIRROR"}
  "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"
  "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion"
)
readonly files=(
  "train-images-idx3-ubyte.gz 8d4fb7e6c68d591d4c3dfef9ec88bf0d"
  "train-labels-idx1-ubyte.gz 25c81989df183df01b3e8a0aad5dffbe"
  "t10k-images-idx3-ubyte.gz bef4ecab320f06d8554ea6380940ec79"
  "t10k-labels-idx1-ubyte.gz bb300cfdad3c16e7a12a480ee83cd310"
)

die() {
  echo "fetch-fashion-mnist: $*" >&2
  exit 1
}

md5_of() { md5sum "$1" | cut -d' ' -f1; }

# Connect timeouts so that no network fails within seconds instead of hanging; the speed limit
# aborts a transfer that stalls (under 1 KB/s for 30 s) without capping a slow but live one. No
# retries: the next mirror is the retry.
download() {  # url dest
  if command -v curl > /dev/null; then
    curl --fail --silent --show-error --location --connect-timeout 15 \
      --speed-limit 1024 --speed-time 30 --output "$2" "$1"
  elif command -v wget > /dev/null; then
    wget --no-verbose --connect-timeout=15 --read-timeout=30 --tries=1 --output-document="$2" "$1"
  else
    die "neither curl nor wget is installed; install one, or use apt-get install dataset-fashion-mnist"
  fi
}

command -v md5sum > /dev/null || die "md5sum not found (package coreutils)"
mkdir -p "$target" || die "cannot create directory $target"

tmp=""
trap 'if [[ -n "$tmp" ]]; then rm -f "$tmp"; fi' EXIT

for entry in "${files[@]}"; do
  read -r name want <<< "$entry"
  dest="$target/$name"
  if [[ -f "$dest" ]]; then
    have="$(md5_of "$dest")"
    if [[ "$have" == "$want" ]]; then
      echo "$dest: present, MD5 ok"
      continue
    fi
    echo "$dest: present but MD5 is $have, expected $want; downloading again"
  fi

  tmp="$(mktemp "$target/.$name.XXXXXX")"
  fetched=""
  for mirror in "${mirrors[@]}"; do
    echo "$dest: downloading $mirror/$name"
    if download "$mirror/$name" "$tmp"; then
      fetched="$mirror/$name"
      break
    fi
    echo "$dest: download from $mirror failed" >&2
  done
  if [[ -z "$fetched" ]]; then
    die "could not download $name from any of: ${mirrors[*]} (no network?); alternatively" \
      "apt-get install dataset-fashion-mnist and pass --data-dir /usr/share/datasets/fashion-mnist"
  fi

  have="$(md5_of "$tmp")"
  if [[ "$have" != "$want" ]]; then
    die "$fetched: MD5 is $have, expected $want; download deleted"
  fi
  chmod "$(printf '%o' $((0666 & ~$(umask))))" "$tmp"  # mktemp made it 0600
  mv -f "$tmp" "$dest"
  tmp=""
  echo "$dest: downloaded, MD5 ok"
done

echo "Fashion-MNIST is in $target"
