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
#   gpubot-priv fetch HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE...]
#       Start `HF download REPO --revision COMMIT --local-dir TARGET [--include INCLUDE]...` detached,
#       as the owner of TARGET's parent folder, never as root (sudoers pins HF and ROOT). Refused
#       (exit 4) unless every word is plain (no blank, no control character; REPO ORG/NAME, COMMIT 40
#       hex digits, ENDPOINT an http(s) URL, INCLUDE a file pattern) and fetch_place (below) accepts
#       TARGET: under ROOT resolved now, no symlink, no mount point near it, and ROOT's and the parent's
#       walks from / changeable only by root or that owner; HF and its interpreter likewise. Then it
#       becomes that user (setpriv) and runs fetch_launch as it. Prints pid= and start=.
#   gpubot-priv fetch HF ROOT cancel TARGET PID START
#       End the download recorded in TARGET's state folder (PID and START must be the ones recorded
#       there), as the owner of TARGET's parent folder: fetch_cancel (a pidfd held while it checks).
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

# pinned_signal TERM|KILL PID START SHA [group]: send the signal to PID only while it is still the process
# planned (START: field 22 of /proc/PID/stat; SHA: SHA-256 of /proc/PID/cmdline, or - for the start
# time alone). With python3 (3.9+, Linux 5.3+) the process is held by a pidfd first and checked
# through /proc after that, and the signal goes to the pidfd: a PID reused at any moment is never
# signalled. With "group", the signal goes to PID's process group instead, still while the pidfd is
# held: the pidfd keeps the number PID from being given to another process, so the group is the
# planned process's own. Without python3, the check and `kill` run back to back in this call.
# Return 0 signalled, 1 gone (or a zombie), 2 spared (the PID is another process now), 5 not permitted.
pinned_signal() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -I -S -c '
import hashlib, os, signal, sys
def main(sig, pid, start, sha, group=""):
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
    if st[19] != start or sha != "-" and hashlib.sha256(cmd).hexdigest() != sha:
        return 2
    s = signal.SIGTERM if sig == "TERM" else signal.SIGKILL
    try:
        if group == "group":
            os.killpg(pid, s)
        else:
            signal.pidfd_send_signal(fd, s)
    except ProcessLookupError:
        return 1
    except PermissionError:
        return 5
    return 0
try:
    sys.exit(main(*sys.argv[1:6]))
except Exception:
    sys.exit(9)
' "$1" "$2" "$3" "$4" "${5:-}"
    p_rc=$?
    case $p_rc in 0|1|2|5) return $p_rc;; esac
  fi
  p_g=; [ "${5:-}" = group ] && p_g=-
  p_st=$(cat "/proc/$2/stat" 2>/dev/null) || return 1
  p_st=${p_st##*) }
  # shellcheck disable=SC2086
  set -- "$1" "$2" "$3" "$4" $p_st
  [ "$5" = Z ] && return 1
  [ "${24}" = "$3" ] || return 2
  [ "$4" = - ] || [ "$(sha256sum < "/proc/$2/cmdline" 2>/dev/null | cut -c1-64)" = "$4" ] || return 2
  kill "-$1" "$p_g$2" 2>/dev/null && return 0
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

# trusted PATH root|self|owner whole|above
#   Walk the absolute PATH from / one name at a time, as the kernel resolves it, into $real, and
#   judge everything the walk goes through: every folder and every symlink followed must belong
#   to root ("root"), or to root or the user running this ("self"), or to root or uid $t_uid
#   ("owner", named $t_who: the user a download runs as), and no folder may be writable
#   by group or others unless it has the sticky bit. "whole" judges what PATH resolves to as
#   well; "above" only the folders above it and the symlinks on the way.
#   Return 0 trusted; 1 not ($why: the reasons, "; " between them); 2 PATH cannot be walked ($why).
trusted() {
  why=; real=; t_rest=$1; t_cur=; t_hops=0
  if [ "$2" = owner ]; then t_own="0 $t_uid"; t_words="root or ${t_who:-uid $t_uid}"
  elif [ "$2" = root ] || [ "$(id -u)" = 0 ]; then t_own=0; t_words=root
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
# started PID: field 22 of /proc/PID/stat (its start time), read past the command name (it may hold blanks).
started() { x=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; x=${x##*) }; set -- $x; printf %s "${20}"; }

FETCH_STATE=.cache/gpubot-fetch

# guard PATH [UID]: refuse (the reason on stdout, status 1) an existing PATH that is a symlink, not a
# folder, not owned by UID (default: the user running this), or writable by group or others; guards
# TARGET [UID]: the target, its .cache and the state folder. A folder that passes can be changed by
# no one else but root, so what is written inside it goes where it was meant to.
guard() {
  g_u=${2:-$(id -u)}
  if [ -L "$1" ]; then echo "$1 is a symbolic link: another user could point the download's writes anywhere; remove it, or give a real folder"; return 1; fi
  [ -e "$1" ] || return 0
  [ -d "$1" ] || { echo "$1 is not a folder: remove it"; return 1; }
  gu=$(stat -c %u -- "$1") && gm=$(stat -c %a -- "$1") || { echo "$1 could not be checked"; return 1; }
  [ "$gu" = "$g_u" ] || { g_n=$(getent passwd "$g_u" | cut -d: -f1); echo "$1 belongs to $(stat -c %U -- "$1"), not ${g_n:-uid $g_u}: another user could plant links in it; give a folder ${g_n:-uid $g_u} owns (chown ${g_n:-$g_u} $1)"; return 1; }
  [ $((0$gm & 022)) -eq 0 ] || { echo "$1 is writable by group or others (mode $gm): another user could plant links in it; chmod go-w $1"; return 1; }
}
guards() { for gd in "$1" "$1/.cache" "$1/$FETCH_STATE"; do guard "$gd" "${2:-}" || return 1; done; }

# fetch_words HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE...]: refuse a word the download is never given.
fetch_words() {
  [ $# -ge 6 ] || refuse "usage: fetch HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE...]"
  for w in "$@"; do case $w in ''|*[[:space:]]*|*[[:cntrl:]]*) refuse "an empty word, a blank or a control character in the arguments";; esac; done
  case $1 in /*) ;; *) refuse "the hf command $1 is not an absolute path";; esac
  case $2 in /*) ;; *) refuse "root $2 is not absolute";; esac
  case $3 in /?*) ;; *) refuse "target $3 is not absolute";; esac
  case $4 in -*|.*|*/*/*|*..*|*[!A-Za-z0-9._/-]*) refuse "repo $4 is not ORG/NAME";; */?*) ;; *) refuse "repo $4 is not ORG/NAME";; esac
  case $5 in *[!0-9a-f]*) refuse "commit $5 is not 40 hex digits";; esac
  [ ${#5} -eq 40 ] || refuse "commit $5 is not 40 hex digits"
  case $6 in http://?*|https://?*) ;; *) refuse "endpoint $6 is not an http(s) URL";; esac
  case $6 in *[!A-Za-z0-9._~:/%-]*) refuse "endpoint $6 is not an http(s) URL";; esac
  shift 6
  for g in "$@"; do case $g in -*|*..*|*[!]A-Za-z0-9._*?/[-]*) refuse "include $g is not a file pattern";; esac; done
}

# fetch_place ROOT TARGET [UID|nonroot]: where a download may go, checked as whoever runs it (the helper as root; gpubot
# itself as the bot user when it plans or downloads as itself). ROOT resolves (not to /); TARGET is a plain
# absolute path strictly under it, not a symlink; its parent folder (or the nearest that exists) is its own
# real path; the
# walks from / of ROOT and of that parent go only through what root or the parent's owner (UID when given:
# the user the download runs as, 0 for a bot logged in as root; "nonroot": the owner, refused when root) may
# change (no
# folder writable by group or others without the sticky bit: whoever could change one could swap the target
# for a link); no mount point at, on the way to or below TARGET. Prints owner=UID and user=NAME (the
# parent's owner: the user the download runs as). Refuses (exit 4, the reason) otherwise.
fetch_place() {
  f_root=$1; f_t=$2
  rr=$(realpath -e -- "$f_root") || refuse "root $f_root does not exist"
  [ "$rr" = / ] && refuse "root / is never allowed"
  case "$f_t/" in */../*|*/./*|*//*) refuse "$f_t is not a plain path";; esac
  case $f_t in "${rr%/}"/?*) ;; *) refuse "$f_t is not under $rr";; esac
  [ -L "$f_t" ] && refuse "$f_t is a symbolic link"
  f_p=$(dirname -- "$f_t")
  while [ ! -e "$f_p" ] && [ ! -L "$f_p" ]; do f_p=$(dirname -- "$f_p"); done
  f_rp=$(realpath -e -- "$f_p") || refuse "$f_p does not resolve"
  [ "$f_rp" = "$f_p" ] || refuse "$f_p resolves to $f_rp"
  [ -d "$f_p" ] || refuse "$f_p is not a folder"
  f_o=$(stat -c %u -- "$f_p") && f_on=$(stat -c %U -- "$f_p") || refuse "cannot inspect $f_p"
  t_uid=${3:-$f_o}
  if [ "$t_uid" = nonroot ]; then
    [ "$f_o" != 0 ] || refuse "$f_p belongs to root, and a download never runs as root through sudo: give the model folders to the user that owns the weights (chown USER $f_p)"
    t_uid=$f_o
  fi
  if [ "$t_uid" = "$f_o" ]; then t_who=$f_on; else t_who=$(getent passwd "$t_uid" | cut -d: -f1); t_who=${t_who:-uid $t_uid}; fi
  trusted "$f_root" owner whole; f_rc=$?
  [ $f_rc -eq 2 ] && refuse "root $f_root: $why"
  [ $f_rc -eq 0 ] || refuse "root $f_root is not safe for a download as $t_who: $why (whoever may change it could point the download elsewhere)"
  [ "$real" = "$rr" ] || refuse "root $f_root resolves to $rr but was walked to $real"
  trusted "$f_p" owner whole; f_rc=$?
  [ $f_rc -eq 0 ] || refuse "$f_p is not safe for a download as $t_who: $why (whoever may change it could swap the target for a link)"
  f_m=$(mounts_near "$rr" "$f_t") || refuse "$f_m"
  printf 'owner=%s\nuser=%s\n' "$f_o" "$f_on"
}

# fetch_hf HF: the hf command (and the interpreter its first line names) may be changed only by root or
# uid $t_uid: whoever could change them would run code as that user.
fetch_hf() {
  [ -f "$1" ] && [ -x "$1" ] || refuse "the hf command $1 is not installed"
  trusted "$1" owner whole || refuse "the hf command $1 is not safe to run as $t_who: $why"
  h_l=$(head -c 200 -- "$1" | head -n 1)
  case $h_l in
    '#!'*) h_i=${h_l#??}; h_i=${h_i#"${h_i%%[! ]*}"}; h_i=${h_i%% *}
      case $h_i in /*) ;; *) refuse "the hf command's interpreter $h_i is not an absolute path";; esac
      trusted "$h_i" owner whole || refuse "the hf command's interpreter $h_i is not safe to run as $t_who: $why";;
  esac
}

# fetch_orphans TARGET: the parts a killed client of one process leaves (HASH.ETAG.RANDOM8.incomplete, never
# read again) removed.
fetch_orphans() {
  find "$1/.cache/huggingface/download" -maxdepth 1 -type f -name '*.[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f].incomplete' -delete 2>/dev/null; :
}

# fetch_launch private|shared HF TARGET REPO COMMIT ENDPOINT [INCLUDE...]: run as the user the download runs
# as, after fetch_place: make TARGET and its state folder (0700 "private", 0755 "shared": read back by a
# bot user that is not the downloading one), check them with guards, refuse a download still running into
# it, then start `HF download` detached in a session of its own (setsid nohup), its output in
# STATE/log and its exit status in STATE/rc when it ends. Prints pid= and start=.
fetch_launch() {
  l_mode=$1; l_hf=$2; l_t=$3; l_repo=$4; l_commit=$5; l_ep=$6; shift 6
  l_s=$l_t/$FETCH_STATE
  umask 022
  [ -d "$l_t" ] || mkdir -p -- "$l_t" || refuse "cannot make $l_t"
  l_r=$(realpath -e -- "$l_t") || refuse "$l_t is gone"
  [ "$l_r" = "$l_t" ] || refuse "$l_t now resolves to $l_r"
  l_u=$(guards "$l_t") || refuse "$l_u"
  [ -d "$l_t/.cache" ] || mkdir -m 755 -- "$l_t/.cache" || refuse "cannot make $l_t/.cache"
  [ -d "$l_s" ] || mkdir -m 700 -- "$l_s" || refuse "cannot make $l_s"
  l_u=$(guards "$l_t") || refuse "$l_u"
  if [ "$l_mode" = shared ]; then chmod 755 -- "$l_s"; else chmod 700 -- "$l_s"; fi || refuse "cannot chmod $l_s"
  if [ -f "$l_s/pid" ] && [ ! -f "$l_s/rc" ]; then
    l_p=$(cat -- "$l_s/pid"); l_st=$(cat -- "$l_s/start" 2>/dev/null); l_now=$(started "$l_p")
    [ -n "$l_now" ] && [ "$l_now" = "$l_st" ] && refuse "a download into $l_t is already running (pid $l_p)"
  fi
  rm -f -- "$l_s/rc" "$l_s/rc.tmp" "$l_s/log" "$l_s/pid" "$l_s/start"
  fetch_orphans "$l_t"
  for g in "$@"; do set -- "$@" --include "$g"; shift; done
  export HF_ENDPOINT="$l_ep" HF_HUB_DISABLE_TELEMETRY=1
  cd -- "$l_s" || refuse "cannot enter $l_s"
  # set -C: a state file is created anew (O_EXCL: a symlink in its place fails instead of being followed)
  setsid nohup sh -c 'set -C; h=$1; s=$2; shift 2; "$h" download "$@" > "$s/log" 2>&1; echo $? > "$s/rc.tmp"; mv -f -- "$s/rc.tmp" "$s/rc"' \
    fetch "$l_hf" "$l_s" "$l_repo" --revision "$l_commit" --local-dir "$l_t" "$@" </dev/null >/dev/null 2>&1 &
  l_p=$!
  l_st=$(started "$l_p")
  (set -C; printf %s "$l_p" > "$l_s/pid"; printf %s "$l_st" > "$l_s/start") || refuse "cannot write $l_s/pid"
  printf 'pid=%s\nstart=%s\n' "$l_p" "$l_st"
}

# fetch_cancel given|recorded TARGET PID START: end the download's process group (TERM, then KILL after 5 s)
# only while PID still has START (pinned_signal, a pidfd held through the check and the signal); "recorded":
# only the download TARGET's state folder records. Writes rc 130 while TARGET's folders pass guards (else
# "unsafe REASON" and nothing is written). Prints cancelled, gone, spared or refused last.
fetch_cancel() {
  c_t=$2; c_p=$3; c_st=$4; c_s=$2/$FETCH_STATE
  case $c_p in ''|*[!0-9]*|0*) refuse "pid $c_p";; esac
  [ "$c_p" -gt 1 ] || refuse "pid $c_p"
  case $c_st in ''|*[!0-9]*) refuse "start time $c_st";; esac
  if [ "$1" = recorded ]; then
    c_u=$(guards "$c_t") || refuse "$c_u"
    [ "$(cat -- "$c_s/pid" 2>/dev/null)" = "$c_p" ] && [ "$(cat -- "$c_s/start" 2>/dev/null)" = "$c_st" ] ||
      refuse "pid $c_p is not the download $c_s records"
  fi
  pinned_signal TERM "$c_p" "$c_st" - group; c_rc=$?
  case $c_rc in
    1) echo gone; return 0;;
    2) echo spared; return 0;;
    5) echo "pid $c_p: not permitted"; echo refused; return 0;;
  esac
  c_n=0
  while [ $c_n -lt 25 ] && [ "$(started "$c_p")" = "$c_st" ]; do sleep 0.2; c_n=$((c_n + 1)); done
  [ "$(started "$c_p")" = "$c_st" ] && pinned_signal KILL "$c_p" "$c_st" - group
  if c_u=$(guards "$c_t"); then
    [ -f "$c_s/rc" ] || { rm -f -- "$c_s/rc.tmp"; (set -C; echo 130 > "$c_s/rc.tmp") && mv -f -- "$c_s/rc.tmp" "$c_s/rc"; }
    [ -n "$(started "$c_p")" ] || fetch_orphans "$c_t"
  else
    printf 'unsafe %s\n' "$c_u"
  fi
  echo cancelled
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

# fetch as root: the words, the place, the hf command, then the rest as the parent folder's owner.
do_fetch() {
  [ $# -ge 3 ] || refuse "usage: fetch HF ROOT TARGET REPO COMMIT ENDPOINT [INCLUDE...]"
  [ "$(id -u)" = 0 ] || refuse "fetch is run through sudo (as the bot user: fetch_place and fetch_launch)"
  f_hf=$1; f_r=$2
  if [ "$3" = cancel ]; then
    [ $# -eq 6 ] || refuse "usage: fetch HF ROOT cancel TARGET PID START"
    fetch_words "$f_hf" "$f_r" "$4" a/b 0000000000000000000000000000000000000000 http://x
    f_t=$4
  else
    fetch_words "$@"
    f_t=$3
  fi
  f_said=$(fetch_place "$f_r" "$f_t" nonroot) || { echo "$f_said"; exit 4; }
  t_uid=$(printf '%s\n' "$f_said" | sed -n 's/^owner=//p'); t_who=$(printf '%s\n' "$f_said" | sed -n 's/^user=//p')
  [ "$t_uid" != 0 ] || refuse "a download never runs as root"
  command -v setpriv >/dev/null 2>&1 || refuse "setpriv (util-linux) is not installed"
  f_g=$(id -g -- "$t_who") || refuse "no group for $t_who"
  if [ "$3" = cancel ]; then
    exec setpriv --reuid="$t_uid" --regid="$f_g" --init-groups --reset-env -- /bin/sh -- "$0" fetch-cancel "$4" "$5" "$6"
  fi
  fetch_hf "$f_hf"
  shift 2
  exec setpriv --reuid="$t_uid" --regid="$f_g" --init-groups --reset-env -- /bin/sh -- "$0" fetch-launch "$f_hf" "$@"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case "$verb" in
  delete) [ $# -eq 2 ] || refuse "usage: delete ROOT PATH"; delete_path root "$1" "$2";;
  kill) do_kill "$@";;
  fetch) do_fetch "$@";;
  # what do_fetch runs once it is the downloading user (never as root: no sudo rule names these verbs)
  fetch-launch) [ "$(id -u)" != 0 ] || refuse "fetch-launch never runs as root"; fetch_launch shared "$@";;
  fetch-cancel) [ "$(id -u)" != 0 ] || refuse "fetch-cancel never runs as root"; fetch_cancel recorded "$@";;
  *) refuse "unknown verb '$verb' (delete, kill or fetch)";;
esac
