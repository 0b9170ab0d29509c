"""The console's demo folder is made without writing through a symbolic link: a user who swapped a link in for the
demo root, the sample folder or a sample file finds the link's target untouched (the attacker's tests)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from bot.foundation.config import Settings
from bot.slack.console.demo import DEMO_FILES, DEMO_FOLDER, enable_demo


def settings() -> Settings:
    return Settings(_env_file=None, database_url="sqlite+aiosqlite:///:memory:")


def victim(tmp_path: Path) -> Path:
    target = tmp_path / "victim"
    target.mkdir()
    (target / "config.json").write_text("ORIGINAL")
    return target


def assert_demo_made(data: Path) -> None:
    folder = data / "demo" / DEMO_FOLDER
    assert not (data / "demo").is_symlink() and not folder.is_symlink() and folder.is_dir()
    for name, size in DEMO_FILES.items():
        assert not (folder / name).is_symlink() and (folder / name).stat().st_size == size


def test_the_demo_makes_its_sample_folder(tmp_path):
    demo = enable_demo(settings(), str(tmp_path / "data"))
    assert demo is not None and demo.folder == str(tmp_path / "data" / "demo" / DEMO_FOLDER)
    assert_demo_made(tmp_path / "data")


@pytest.mark.parametrize("swapped", ["demo", f"demo/{DEMO_FOLDER}"])
def test_a_folder_swapped_for_a_link_is_replaced_never_written_through(tmp_path, swapped):
    data, target = tmp_path / "data", victim(tmp_path)
    (data / "demo").mkdir(parents=True)
    link = data / swapped
    if link.exists():
        link.rmdir()
    link.symlink_to(target)
    enable_demo(settings(), str(data))
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    assert (target / "config.json").read_text() == "ORIGINAL"
    assert_demo_made(data)


def test_a_sample_file_swapped_for_a_link_is_replaced_never_written_through(tmp_path):
    data, target = tmp_path / "data", victim(tmp_path)
    folder = data / "demo" / DEMO_FOLDER
    folder.mkdir(parents=True)
    (folder / "config.json").symlink_to(target / "config.json")
    (folder / "model-00001-of-00002.safetensors").symlink_to(target / "new-file")
    enable_demo(settings(), str(data))
    assert (target / "config.json").read_text() == "ORIGINAL" and not (target / "new-file").exists()
    assert_demo_made(data)


def test_a_configured_policy_turns_the_demo_off(tmp_path):
    configured = Settings(_env_file=None, database_url="sqlite+aiosqlite:///:memory:", allowed_roots={})
    assert enable_demo(configured, str(tmp_path / "data")) is None
    assert not os.path.exists(tmp_path / "data")


@pytest.mark.slow  # a race run in a loop: seconds of CPU
def test_a_link_swapped_in_a_loop_never_gets_a_byte(tmp_path):
    """Another process swaps the sample folder and a sample file between real ones and links to a victim while the
    console starts again and again: each start makes the demo or fails with OSError, the victim is never written."""
    import threading

    data, target = tmp_path / "data", victim(tmp_path)
    enable_demo(settings(), str(data))
    folder = data / "demo" / DEMO_FOLDER
    stop = threading.Event()

    def swap() -> None:
        spare = tmp_path / "spare"
        while not stop.is_set():
            try:
                os.rename(folder, spare)
                folder.symlink_to(target)
                folder.unlink()
                os.rename(spare, folder)
                (folder / "config.json").unlink()
                (folder / "config.json").symlink_to(target / "config.json")
            except OSError:
                pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                enable_demo(settings(), str(data))
    finally:
        stop.set()
        swapper.join()
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    assert (target / "config.json").read_text() == "ORIGINAL"
