#!/bin/sh
# gpubot-priv: the only program gpubot runs as root through sudo, besides `systemctl stop|start|restart UNIT`.
# Install root-owned and not writable by anyone else, e.g.
#   install -m 0755 -o root -g root gpubot-priv /usr/local/libexec/gpubot-priv
# It trusts nothing it is given: sudoers pins the verb (and, for delete, the allowed root); this
# script re-checks everything else itself, as root, at the moment it acts.
#
#   gpubot-priv delete ROOT PATH
#       ROOT: an allowed root as written in sudoers (absolute, no blanks, not /).
#       PATH: the resolved path to delete. Refused (exit 4, reason on stdout) unless PATH is
#       exactly its own `realpath -e` (no symlink, no ..), lies strictly under ROOT's real
#       path, and is not a mount point. The parent folder is entered (cd -P) and checked again,
#       then the last component is removed with `rm -rf --one-file-system` from there, so a
#       folder swapped for a symlink after the check cannot redirect the deletion.
#       Exit 0 deleted, 3 gone already, 4 refused, 5 still there after rm.
#   gpubot-priv kill TERM|KILL PID START SHA
#       Signal PID only while it is still the planned process (START: field 22 of
#       /proc/PID/stat; SHA: SHA-256 of /proc/PID/cmdline) and a GPU process: listed by
#       `nvidia-smi --query-compute-apps=pid` or holding /dev/nvidia* open. Never PID 1.
#       Exit 0 signalled, 1 gone (or a zombie), 2 spared (the PID is another process now),
#       4 refused.
# nvidia-smi is looked up next to this script first (a root-owned folder), then in the system path.
set -u
export LC_ALL=C
here=$(dirname -- "$0")
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

refuse() { echo "refused: $*"; exit 4; }

is_mount() {
  mountpoint -q -- "$1" 2>/dev/null && return 0
  [ "$(stat -c %d -- "$1")" != "$(stat -c %d -- "$(dirname -- "$1")")" ]
}

do_delete() {
  [ $# -eq 2 ] || refuse "usage: delete ROOT PATH"
  root=$1; p=$2
  case "$root" in /*) ;; *) refuse "root $root is not absolute";; esac
  case "$root$p" in *[[:space:]]*|*[[:cntrl:]]*) refuse "blanks or control characters in the arguments";; esac
  rr=$(realpath -e -- "$root") || refuse "root $root does not exist"
  [ "$rr" = / ] && refuse "root / is never allowed"
  [ -e "$p" ] || [ -L "$p" ] || { echo "$p no longer exists"; exit 3; }
  r=$(realpath -e -- "$p") || { echo "$p no longer exists"; exit 3; }
  [ "$r" = "$p" ] || refuse "$p resolves to $r (give the resolved path)"
  case "$r" in "${rr%/}"/?*) ;; *) refuse "$r is not under $rr";; esac
  is_mount "$r" && refuse "$r is a mount point"
  parent=$(dirname -- "$r"); name=$(basename -- "$r")
  cd -P -- "$parent" || refuse "cannot enter $parent"
  [ "$(pwd -P)" = "$parent" ] || refuse "$parent moved"
  [ -L "./$name" ] || [ -e "./$name" ] || { echo "$r no longer exists"; exit 3; }
  rm -rf --one-file-system -- "./$name"; rc=$?
  if [ -e "./$name" ] || [ -L "./$name" ]; then echo "$r is still there (rm exit $rc)"; exit 5; fi
  echo "deleted $r"
}

gpu_process() {
  smi=nvidia-smi
  [ -x "$here/nvidia-smi" ] && smi="$here/nvidia-smi"
  if "$smi" --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | grep -qx -- "$1"; then
    return 0
  fi
  for fd in /proc/"$1"/fd/*; do
    case "$(readlink -- "$fd" 2>/dev/null)" in /dev/nvidia*) return 0;; esac
  done
  return 1
}

do_kill() {
  [ $# -eq 4 ] || refuse "usage: kill TERM|KILL PID START SHA"
  sig=$1; pid=$2; start=$3; sha=$4
  case "$sig" in TERM|KILL) ;; *) refuse "signal $sig (only TERM or KILL)";; esac
  case "$pid" in ''|*[!0-9]*|0*) refuse "pid $pid";; esac
  [ "$pid" -gt 1 ] || refuse "pid $pid"
  case "$start" in ''|*[!0-9]*) refuse "start time $start";; esac
  case "$sha" in *[!0-9a-f]*) refuse "command hash $sha";; esac
  [ ${#sha} -eq 64 ] || refuse "command hash $sha"
  st=$(cat "/proc/$pid/stat" 2>/dev/null) || { echo "$pid gone"; exit 1; }
  st=${st##*) }
  # shellcheck disable=SC2086
  set -- $st
  [ "$1" = Z ] && { echo "$pid gone"; exit 1; }
  [ "${20}" = "$start" ] || { echo "$pid spared"; exit 2; }
  [ "$(sha256sum < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-64)" = "$sha" ] || { echo "$pid spared"; exit 2; }
  gpu_process "$pid" || refuse "pid $pid is not a GPU process"
  kill "-$sig" "$pid" 2>/dev/null || { echo "$pid gone"; exit 1; }
  echo "$pid $sig"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case "$verb" in
  delete) do_delete "$@";;
  kill) do_kill "$@";;
  *) refuse "unknown verb '$verb' (delete or kill)";;
esac
