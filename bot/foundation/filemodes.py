"""Files that hold secrets or power, checked as OpenSSH and sudo check theirs before using them.

* A settings file (``gpubot.toml``, ``.env``) that someone else may change is refused
  (:class:`~bot.foundation.errors.ConfigError`, exit 78): writable by its group or others, owned by
  another user (root excepted), or in a folder others may write without the sticky bit. Whoever may
  write it may make themselves admin, add a deletion root or point the bot at their database.
* One that holds secrets (a token, the signing secret, a password in the database URL) and that others
  may read is named in one warning per file and process.
* A private key that others may read is refused, as OpenSSH refuses it ("UNPROTECTED PRIVATE KEY FILE"):
  any group or other bit on a key the bot's user owns, or readable by everyone whoever owns it.
* The default SQLite database is created 0600 in a data folder made 0700 (:mod:`bot.foundation.db.migrate`).

Every refusal names the file and the ``chmod`` (or ``chown``) that fixes it.
"""

from __future__ import annotations

import logging
import os
import stat

from bot.foundation.errors import ConfigError
from bot.foundation.masking import mask_secrets

log = logging.getLogger("gpubot.config")
_warned: set[str] = set()


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def others_may_change(path: str) -> str | None:
    """Why someone other than this user (or root) may change ``path``, or ``None``; the fix included."""
    st = os.stat(path)
    me = os.geteuid()
    if st.st_mode & 0o022:
        return f"may be written by its group or others (mode {_mode(st)}); fix: chmod go-w {path}"
    if st.st_uid not in (0, me):
        return f"is owned by uid {st.st_uid}, not by this user (uid {me}) or root; fix: chown {me} {path}"
    folder = os.path.dirname(os.path.abspath(path))
    dst = os.stat(folder)
    if dst.st_mode & 0o002 and not dst.st_mode & stat.S_ISVTX:
        mode = _mode(dst)
        return f"is in {folder}, which others may write (mode {mode}: they may replace it); fix: chmod o-w {folder}"
    return None


def check_settings_file(path: str, *, holds_secrets: bool, what: str = "settings file") -> None:
    """Refuse ``path`` when others may change it; warn (once) when it ``holds_secrets`` and others may read it.
    A missing file is no concern here (the caller knows whether it must exist)."""
    if not os.path.exists(path):
        return
    path = os.path.abspath(path)
    why = others_may_change(path)
    if why:
        raise ConfigError(
            f"the {what} {path} {why}. Whoever may change it may make themselves admin or add a deletion root: "
            "gpubot uses no such file"
        )
    st = os.stat(path)
    if holds_secrets and st.st_mode & 0o044 and path not in _warned:
        _warned.add(path)
        log.warning(
            "the %s %s holds secrets and may be read by its group or others (mode %s); fix: chmod 600 %s",
            what,
            path,
            _mode(st),
            path,
        )


def check_private_key(path: str) -> None:
    """Refuse the private key ``path`` when others may read it (OpenSSH's rule). A missing file is left to
    the SSH client to report."""
    try:
        st = os.stat(path)
    except OSError:
        return
    mine = st.st_uid == os.geteuid()
    if (mine and st.st_mode & 0o077) or st.st_mode & 0o004:
        raise ConfigError(
            f"the SSH private key {path} may be read by others (mode {_mode(st)}); OpenSSH refuses such a key "
            f"and so does gpubot; fix: chmod 600 {path}"
        )


def holds_secrets(path: str) -> bool:
    """Whether the file's text holds a secret shape (:func:`~bot.foundation.masking.mask_secrets` changes it):
    a token, the signing secret, a password in a URL. An unreadable file holds none gpubot could use."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    lines = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))  # comments hold examples
    return mask_secrets(lines) != lines


def check_files(*, config: str | None, env_file: str | None, key_file: str | None) -> None:
    """The checks of every command before it uses its settings: the TOML settings file ``config``, the
    ``env_file`` (``.env``) and the SSH private key ``key_file`` (``GPUBOT_SSH_KEY_FILE``); ``None``: none.
    Raises :class:`~bot.foundation.errors.ConfigError` (exit 78)."""
    for path, what in ((config, "settings file"), (env_file, "settings file")):
        if path:
            check_settings_file(path, holds_secrets=holds_secrets(path), what=what)
    if key_file:
        check_private_key(os.path.expanduser(key_file))
