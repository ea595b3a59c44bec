#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine. Builds a minimal Debian 12 root with
# debootstrap (variant minbase: no compiler, no git, nothing of ParaLab's), copies a clean clone
# of this repository's HEAD into it, and runs, inside it with chroot and as its root user,
#   1. scripts/quickstart.sh   (the main job, set-up included)
#   2. scripts/test.sh         (the tests, set-up included)
# with nothing installed but what those scripts install. Prints what each took and whether it
# passed; exits 1 if either failed. Uncommitted changes are not part of the check (a warning
# says so). Needs root, debootstrap and Debian's mirror; about 15 minutes on 2 cores.
#
# Usage: scripts/fresh-machine-check.sh [--root DIR] [--keep] [--mirror URL] [--suite SUITE]
#   --root DIR    where to build the root (default: a new directory under /var/tmp); must not exist
#   --keep        keep the root afterwards (logs are kept either way, beside it)
#   --mirror URL  Debian mirror (default http://deb.debian.org/debian)
#   --suite NAME  Debian suite (default bookworm, Debian 12)
# Run it whenever the dependency list changes; CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
root="" keep=0 mirror=http://deb.debian.org/debian suite=bookworm
while (($#)); do
  case "$1" in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    --mirror) mirror=${2:?--mirror needs a URL}; shift 2 ;;
    --suite) suite=${2:?--suite needs a name}; shift 2 ;;
    *) echo "fresh-machine-check.sh: unknown option '$1' (known: --root, --keep, --mirror, --suite)" >&2; exit 2 ;;
  esac
done
say() { echo "fresh-machine-check: $*"; }
die() { echo "fresh-machine-check.sh: $*" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount and chroot)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null || die "$repo is not a git checkout with a commit"
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
  say "warning: uncommitted changes in $repo are not part of this check (it clones HEAD)"
fi
if [[ -z $root ]]; then
  root=$(mktemp -d /var/tmp/paralab-fresh.XXXXXX)
  rmdir "$root"
fi
[[ ! -e $root ]] || die "$root exists; give a new directory"
logs=$root.logs
mkdir -p "$logs"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
  if ((keep == 0)) && [[ -d $root ]]; then rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT

t0=$(date +%s)
say "debootstrap $suite (minbase) into $root from $mirror"
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" > "$logs/debootstrap.log" 2>&1; then
  tail -n 20 "$logs/debootstrap.log" >&2
  die "debootstrap failed (log: $logs/debootstrap.log)"
fi
say "root ready in $(($(date +%s) - t0)) s"

commit=$(git -C "$repo" rev-parse HEAD)
git clone -q --no-local "$repo" "$root/root/paralab"
say "cloned $commit into /root/paralab"

cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev dev/pts; do mkdir -p "$root/$m"; done
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount -t sysfs sysfs "$root/sys" && mounted+=("$root/sys")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
mount --bind /dev/pts "$root/dev/pts" && mounted+=("$root/dev/pts")

# Each command in a clean environment, as a new user would type it.
run_in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/paralab && $1"
}
names=() seconds=() verdicts=()
for cmd in scripts/quickstart.sh scripts/test.sh; do
  log="$logs/$(basename "$cmd" .sh).log"
  say "running $cmd (log: $log)"
  start=$(date +%s)
  if run_in_root "$cmd" > "$log" 2>&1; then verdict=PASS; else verdict="FAIL (exit $?)"; fi
  names+=("$cmd") seconds+=($(($(date +%s) - start))) verdicts+=("$verdict")
  say "$cmd: $verdict in ${seconds[-1]} s"
  [[ $verdict == PASS ]] || tail -n 15 "$log" | sed 's/^/    /'
done

echo
echo "fresh Debian $suite root, commit $commit, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
printf '%-24s %8s  %s\n' command seconds result
status=0
for i in "${!names[@]}"; do
  printf '%-24s %8s  %s\n' "${names[i]}" "${seconds[i]}" "${verdicts[i]}"
  [[ ${verdicts[i]} == PASS ]] || status=1
done
echo "logs: $logs"
exit $status
