"""A first run can try a clean and its approval: with ``GPUBOT_ALLOWED_ROOTS`` unset, the console
allows deleting under a demo folder of the data directory, on ``localhost`` only, and puts a
sample weight folder there. Nothing else is deleted on ``localhost`` in the demo: the Hugging Face
cache there is the user's own, so the console refuses ``clean localhost hf-cache`` (:meth:`Demo.refusal`).

The default allowed roots (``/shared``, ``/models``) rarely exist on a newcomer's machine, so
without this no ``clean`` could be planned before editing settings. A set ``GPUBOT_ALLOWED_ROOTS``
(even ``{}``) is used as it is: the demo never widens a configured policy.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass

from bot.domain.hosts.service import LOCAL_NAMES
from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.foundation.config import ActionSettings, Settings, default_data_dir

DEMO_FOLDER = "old-model"
DEMO_FILES = {
    "model-00001-of-00002.safetensors": 3 * 1024 * 1024,
    "model-00002-of-00002.safetensors": 2 * 1024 * 1024,
    "config.json": 512,
}
"""File name -> size in bytes of the sample weight folder (5 MiB in all)."""


@dataclass(frozen=True)
class Demo:
    root: str
    """The demo root (``<data dir>/demo``), allowed on ``localhost``."""
    folder: str
    """The sample weight folder under it, (re)made at each console start."""

    def allowing(self, settings: Settings) -> Settings:
        """A copy of ``settings`` whose allowed roots add the demo root on ``localhost``."""
        return settings.updated(allowed_roots={**settings.actions.allowed_roots, "localhost": [self.root]})

    def refusal(self, command: object) -> str | None:
        """Why the demo does not let ``command`` (a parsed ``/gpu`` command) be planned, or ``None``:
        cleaning ``localhost``'s Hugging Face cache, which lies outside the demo root (the HF clean
        would use the cache's own ``hub`` as its root, and the cache is the user's real one)."""
        if (
            isinstance(command, ActionSpec)
            and command.kind is ActionKind.CLEAN_HF
            and command.host.lower() in LOCAL_NAMES
        ):
            return (
                f"the console's demo deletes only under {self.root} on localhost, so it does not clean localhost's "
                "Hugging Face cache (your own downloads). Set GPUBOT_ALLOWED_ROOTS to use real roots; then the demo "
                "is off and `clean localhost hf-cache` is planned as in Slack."
            )
        return None

    def banner(self, command: str, *, may_clean: bool = True) -> str:
        """What the console says at start, so the user knows the demo root exists and why; the
        clean to try only when the user ``may_clean`` (an operator or admin), else how to get it."""
        head = (
            f"GPUBOT_ALLOWED_ROOTS is not set, so this console allows deleting under {self.root} on localhost only\n"
            "(a demo; it put a 5 MiB sample folder there)."
        )
        if not may_clean:
            return (
                f"{head} You are a viewer here: `{command} status localhost` and `{command} audit` work,\n"
                "but not clean; `gpubot console --role operator` tries a clean and its approval."
            )
        return (
            f"{head} Try `{command} clean localhost weights={self.folder}`,\n"
            "then `as alice` and press Approve. Real roots: set GPUBOT_ALLOWED_ROOTS\n"
            "(docs/actions.md#where-deletions-may-happen)."
        )


def enable_demo(settings: Settings, data_dir: str | None = None) -> Demo | None:
    """When ``allowed_roots`` was not set (environment or ``.env``), make the sample folder under
    ``<data dir>/demo`` and return the demo (:meth:`Demo.allowing` gives the settings that allow
    deleting there); else ``None``. ``settings`` is only read.

    Nothing is written through a symbolic link: ``demo``, ``demo/old-model`` and the sample files are
    opened relative to their folder without following links, and a link found in their place is removed
    (its target is left as it is) and replaced by a real folder or file. Raises :class:`OSError` when the
    folder cannot be written."""
    if "allowed_roots" in settings.actions.model_fields_set:
        return None
    data = data_dir or default_data_dir()
    root = os.path.join(data, "demo")
    folder = os.path.join(root, DEMO_FOLDER)
    os.makedirs(data, exist_ok=True)
    data_fd = os.open(data, os.O_RDONLY | os.O_DIRECTORY)
    try:
        root_fd = _real_folder("demo", data_fd)
        try:
            folder_fd = _real_folder(DEMO_FOLDER, root_fd)
            try:
                for name, size in DEMO_FILES.items():
                    _sample_file(name, size, folder_fd)
            finally:
                os.close(folder_fd)
        finally:
            os.close(root_fd)
    finally:
        os.close(data_fd)
    return Demo(root, folder)


def _is_link(name: str, parent_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _real_folder(name: str, parent_fd: int) -> int:
    """A descriptor of the folder ``name`` in ``parent_fd``, made when missing; a symbolic link there is
    removed first, never followed. Raises :class:`OSError` (a file of that name, a folder that keeps changing)."""
    for _ in range(3):
        if _is_link(name, parent_fd):
            os.unlink(name, dir_fd=parent_fd)
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # a link swapped in since the check: look again
                raise
    raise OSError(errno.ELOOP, f"{name} keeps changing; the demo folder was not made")


def _sample_file(name: str, size: int, folder_fd: int) -> None:
    """``size`` zero bytes in the regular file ``name`` of ``folder_fd``, unless it already is one of that size;
    a link there is removed, never written through."""
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            return
        if stat.S_ISLNK(st.st_mode):
            os.unlink(name, dir_fd=folder_fd)
    except FileNotFoundError:
        pass
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=folder_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(b"\0" * size)


def active_demo(actions: ActionSettings, data_dir: str | None = None) -> Demo | None:
    """The demo whose action settings (``settings.actions``) ``actions`` are (:meth:`Demo.allowing`:
    ``localhost``'s allowed roots are exactly ``<data dir>/demo``), else ``None``. Read from the settings so
    that a console given only its services knows the demo is on."""
    root = os.path.join(data_dir or default_data_dir(), "demo")
    if actions.allowed_roots.get("localhost") != [root]:
        return None
    return Demo(root, os.path.join(root, DEMO_FOLDER))
