#!/bin/sh
# gpubot-priv: the only program gpubot runs as root through sudo, besides `systemctl stop|start|restart UNIT`.
# Install root-owned and not writable by anyone else, e.g.
#   install -m 0755 -o root -g root gpubot-priv /usr/local/libexec/gpubot-priv
# It trusts nothing it is given: sudoers pins the verb (and, for delete, the allowed root); this
# script re-checks everything else itself, as root, at the moment it acts.
#
#   gpubot-priv delete ROOT PATH
#       ROOT: an allowed root as written in sudoers (absolute, no blanks, not /).
#       PATH: the resolved path to delete. Refused (exit 4, the reason on stdout) unless
#       * ROOT is walked from / one name at a time and everything the walk goes through (every
#         folder, every symlink followed, ROOT's own folder) belongs to root, and no folder is
#         writable by group or others without the sticky bit: sudoers pins ROOT's text only, so
#         whoever could change a folder on the way could point ROOT anywhere;
#       * PATH is exactly its own `realpath -e` (no symlink, no ..) and lies strictly under ROOT;
#       * /proc/self/mountinfo has no mount point at PATH, on the way from ROOT to it, or below
#         it (`rm --one-file-system` compares device numbers only: a bind mount of the same
#         filesystem would be followed).
#       Then the parent folder is entered (cd -P) and checked again, and the last component is
#       removed with `rm -rf --one-file-system` from there, so a folder swapped for a symlink
#       after the checks cannot redirect the deletion.
#       Exit 0 deleted, 3 gone already, 4 refused, 5 still there after rm.
#   gpubot-priv kill TERM|KILL PID START SHA
#       Signal PID only while it is still the planned process (START: field 22 of
#       /proc/PID/stat; SHA: SHA-256 of /proc/PID/cmdline) and a GPU process: listed by
#       `nvidia-smi --query-compute-apps=pid` or holding /dev/nvidia* open. Never PID 1, never a
#       system daemon that holds the GPUs (SYSTEM_DAEMONS below, by the name of /proc/PID/exe).
#       The signal itself goes through pinned_signal (a pidfd where python3 has one), so a PID
#       reused after these checks is never signalled.
#       Exit 0 signalled, 1 gone (or a zombie), 2 spared (the PID is another process now),
#       4 refused.
# nvidia-smi is looked up next to this script first (a root-owned folder), then in the system path.
set -u
export LC_ALL=C
here=$(dirname -- "$0")
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

# >>> shared: gpubot also runs this part itself (hosts check, planning, deleting without sudo)
refuse() { echo "refused: $*"; exit 4; }

SYSTEM_DAEMONS='nvidia-persistenced nv-hostengine nv-fabricmanager nvidia-fabricmanager nvidia-powerd nvidia-imex Xorg Xorg.wrap Xwayland X dcgm-exporter nvidia-device-plugin'

# system_daemon PID: exit 0 when /proc/PID/exe names one of SYSTEM_DAEMONS (its path on stdout),
# 1 when it names another executable, 2 when it cannot be read (gone, or not ours to read).
system_daemon() {
  s_exe=$(readlink -- "/proc/$1/exe" 2>/dev/null) || return 2
  s_exe=${s_exe% (deleted)}
  for s_d in $SYSTEM_DAEMONS; do
    [ "${s_exe##*/}" = "$s_d" ] && { printf '%s\n' "$s_exe"; return 0; }
  done
  return 1
}

# pinned_signal TERM|KILL PID START SHA: send the signal to PID only while it is still the process
# planned (START: field 22 of /proc/PID/stat; SHA: SHA-256 of /proc/PID/cmdline). With python3 (3.9+,
# Linux 5.3+) the process is held by a pidfd first and checked through /proc after that, and the
# signal goes to the pidfd: a PID reused at any moment is never signalled. Without it, the check
# and `kill` run back to back in this call. Return 0 signalled, 1 gone (or a zombie), 2 spared
# (the PID is another process now), 5 not permitted.
pinned_signal() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -I -S -c '
import hashlib, os, signal, sys
def main(sig, pid, start, sha):
    pid = int(pid)
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 1
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read()
    except OSError:
        return 1
    if st[0] == "Z":
        return 1
    if st[19] != start or hashlib.sha256(cmd).hexdigest() != sha:
        return 2
    try:
        signal.pidfd_send_signal(fd, signal.SIGTERM if sig == "TERM" else signal.SIGKILL)
    except ProcessLookupError:
        return 1
    except PermissionError:
        return 5
    return 0
try:
    sys.exit(main(*sys.argv[1:5]))
except Exception:
    sys.exit(9)
' "$1" "$2" "$3" "$4"
    p_rc=$?
    case $p_rc in 0|1|2|5) return $p_rc;; esac
  fi
  p_st=$(cat "/proc/$2/stat" 2>/dev/null) || return 1
  p_st=${p_st##*) }
  # shellcheck disable=SC2086
  set -- "$1" "$2" "$3" "$4" $p_st
  [ "$5" = Z ] && return 1
  [ "${24}" = "$3" ] || return 2
  [ "$(sha256sum < "/proc/$2/cmdline" 2>/dev/null | cut -c1-64)" = "$4" ] || return 2
  kill "-$1" "$2" 2>/dev/null && return 0
  [ -d "/proc/$2" ] && return 5
  return 1
}

# judge ENTRY: add to $why when ENTRY could be changed by a uid not in $t_own (a folder or a
# file writable by group or others, unless a folder with the sticky bit; symlinks by owner only).
because() { case "; $why; " in *"; $1; "*) ;; *) why="${why}${why:+; }$1";; esac; }
judge() {
  j_s=$(stat -c '%u %a %F' -- "$1" 2>&1) || { because "cannot inspect $1 ($j_s)"; return 0; }
  j_u=${j_s%% *}; j_s=${j_s#* }; j_m=${j_s%% *}; j_t=${j_s#* }
  case " $t_own " in *" $j_u "*) ;; *) because "$1 belongs to uid $j_u, not $t_words";; esac
  [ "$j_t" = "symbolic link" ] && return 0
  j_m=$((0$j_m))
  if [ $((j_m & 18)) -ne 0 ] && { [ "$j_t" != directory ] || [ $((j_m & 512)) -eq 0 ]; }; then
    if [ $((j_m & 2)) -ne 0 ]; then j_w=everyone; else j_w="its group"; fi
    because "$1 is writable by $j_w (mode $(printf %o $((j_m & 4095))))"
  fi
}

# trusted PATH root|self whole|above
#   Walk the absolute PATH from / one name at a time, as the kernel resolves it, into $real, and
#   judge everything the walk goes through: every folder and every symlink followed must belong
#   to root ("root"), or to root or the user running this ("self"), and no folder may be writable
#   by group or others unless it has the sticky bit. "whole" judges what PATH resolves to as
#   well; "above" only the folders above it and the symlinks on the way.
#   Return 0 trusted; 1 not ($why: the reasons, "; " between them); 2 PATH cannot be walked ($why).
trusted() {
  why=; real=; t_rest=$1; t_cur=; t_hops=0
  if [ "$2" = root ] || [ "$(id -u)" = 0 ]; then t_own=0; t_words=root
  else t_own="0 $(id -u)"; t_words="root or $(id -un)"; fi
  case $t_rest in /*) ;; *) why="$1 is not an absolute path"; return 2;; esac
  judge /
  while :; do
    while :; do case $t_rest in /*) t_rest=${t_rest#/};; *) break;; esac; done
    [ -n "$t_rest" ] || break
    t_name=${t_rest%%/*}
    case $t_rest in */*) t_rest=${t_rest#*/};; *) t_rest=;; esac
    case $t_name in .) continue;; ..) t_cur=${t_cur%/*}; continue;; esac
    t_p=$t_cur/$t_name
    if [ -L "$t_p" ]; then
      t_hops=$((t_hops + 1))
      [ $t_hops -le 40 ] || { why="$1: too many levels of symbolic links"; return 2; }
      judge "$t_p"
      t_to=$(readlink -- "$t_p") || { why="cannot read the symlink $t_p"; return 2; }
      case $t_to in /*) t_cur=;; esac
      t_rest=$t_to/$t_rest
      continue
    fi
    [ -e "$t_p" ] || { why="$t_p does not exist"; return 2; }
    if [ -n "$t_rest" ]; then
      [ -d "$t_p" ] || { why="$t_p is not a folder"; return 2; }
      judge "$t_p"
    elif [ "$3" = whole ]; then
      judge "$t_p"
    fi
    t_cur=$t_p
  done
  real=${t_cur:-/}
  [ -z "$why" ]
}

# mounts_near ROOT TARGET (real paths): return 1 and print the first mount point of
# /proc/self/mountinfo (field 5, octal escapes undone) at TARGET, on the way from ROOT to it, or
# below it; 2 when the mount table cannot be read.
mounts_near() {
  [ -r /proc/self/mountinfo ] || { echo "cannot read /proc/self/mountinfo"; return 2; }
  GPUBOT_R=$1 GPUBOT_T=$2 awk '
    function unesc(s,   o, i, c) {
      o = ""
      while ((i = index(s, "\\")) > 0) {
        c = substr(s, i + 1, 3)
        if (c ~ /^[0-7][0-7][0-7]$/) { o = o substr(s, 1, i - 1) sprintf("%c", substr(c, 1, 1) * 64 + substr(c, 2, 1) * 8 + substr(c, 3, 1)); s = substr(s, i + 4) }
        else { o = o substr(s, 1, i); s = substr(s, i + 1) }
      }
      return o s
    }
    BEGIN { r = ENVIRON["GPUBOT_R"]; t = ENVIRON["GPUBOT_T"]; bad = 0 }
    bad == 0 {
      m = unesc($5)
      if (m == t) { print t " is a mount point"; bad = 1 }
      else if (index(t, m "/") == 1 && index(m, r "/") == 1) { print m " is a mount point on the way from " r " to " t; bad = 1 }
      else if (index(m, t "/") == 1) { print m " is a mount point inside " t; bad = 1 }
    }
    END { exit bad }' /proc/self/mountinfo
}

# delete_path root|self ROOT PATH: the deletion itself (see the header). "root": run by root for
# another user (the sudo helper), so ROOT's whole walk must belong to root and PATH may hold no
# blank; "self": run by the user who deletes (the bot user, or the bot logged in as root), so the
# folders above ROOT must belong to root or that user (ROOT itself may be a shared group folder).
delete_path() {
  d_mode=$1; root=$2; p=$3
  case "$root" in /*) ;; *) refuse "root $root is not absolute";; esac
  case "$root$p" in *[[:cntrl:]]*) refuse "control characters in the arguments";; esac
  if [ "$d_mode" = root ]; then
    case "$root$p" in *[[:space:]]*) refuse "blanks in the arguments";; esac
    d_whole=whole
  else
    d_whole=above
  fi
  rr=$(realpath -e -- "$root") || refuse "root $root does not exist"
  [ "$rr" = / ] && refuse "root / is never allowed"
  trusted "$root" "$d_mode" "$d_whole"; d_rc=$?
  [ $d_rc -eq 2 ] && refuse "root $root: $why"
  [ $d_rc -eq 0 ] || refuse "root $root is not safe: $why (whoever may change it could point $root elsewhere)"
  [ "$real" = "$rr" ] || refuse "root $root resolves to $rr but was walked to $real"
  [ -e "$p" ] || [ -L "$p" ] || { echo "$p no longer exists"; exit 3; }
  r=$(realpath -e -- "$p") || { echo "$p no longer exists"; exit 3; }
  [ "$r" = "$p" ] || refuse "$p resolves to $r (give the resolved path)"
  case "$r" in "${rr%/}"/?*) ;; *) refuse "$r is not under $rr";; esac
  d_m=$(mounts_near "$rr" "$r") || refuse "$d_m"
  parent=$(dirname -- "$r"); name=$(basename -- "$r")
  cd -P -- "$parent" || refuse "cannot enter $parent"
  [ "$(pwd -P)" = "$parent" ] || refuse "$parent moved"
  [ -L "./$name" ] || [ -e "./$name" ] || { echo "$r no longer exists"; exit 3; }
  rm -rf --one-file-system -- "./$name"; rc=$?
  if [ -e "./$name" ] || [ -L "./$name" ]; then echo "$r is still there (rm exit $rc)"; exit 5; fi
  echo "deleted $r"
}
# <<< shared

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
  exe=$(system_daemon "$pid"); case $? in
    0) refuse "pid $pid is $exe, a system daemon (never killed by gpubot: stop its unit instead)";;
    2) [ -d "/proc/$pid" ] || { echo "$pid gone"; exit 1; }; refuse "pid $pid: cannot read /proc/$pid/exe";;
  esac
  gpu_process "$pid" || refuse "pid $pid is not a GPU process"
  pinned_signal "$sig" "$pid" "$start" "$sha"; case $? in
    0) ;;
    2) echo "$pid spared"; exit 2;;
    5) refuse "pid $pid: not permitted";;
    *) echo "$pid gone"; exit 1;;
  esac
  echo "$pid $sig"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case "$verb" in
  delete) [ $# -eq 2 ] || refuse "usage: delete ROOT PATH"; delete_path root "$1" "$2";;
  kill) do_kill "$@";;
  *) refuse "unknown verb '$verb' (delete or kill)";;
esac
