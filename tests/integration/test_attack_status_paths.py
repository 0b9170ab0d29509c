"""A viewer names a status path under a model folder that a symbolic link below it leads out of (to a
file of the bot user's, say): the path passes the check as written, and the host measures nothing
through the link; a real folder beside it is still measured."""

from __future__ import annotations

import json

from bot.foundation.masking import mask_data
from tests.support.blockkit import blocks_text

SECRET_SIZE = 7_654_321


async def test_a_status_path_through_a_symlink_out_of_its_place_is_not_measured(slack_bot, services, tmp_path):
    models, outside = tmp_path / "models", tmp_path / "home"
    (models / "qwen").mkdir(parents=True)
    (models / "qwen" / "w.safetensors").write_bytes(b"w" * 300_000)
    outside.mkdir()
    (outside / "id_ed25519").write_bytes(b"k" * SECRET_SIZE)
    (models / "leak").symlink_to(outside)
    services.settings.probes.status_path_roots = [str(models)]

    await slack_bot.command(f"status localhost {models}/leak/id_ed25519 {models}/qwen", user_id="U9")
    status = await slack_bot.recorder.wait_for("chat.update", timeout=60)
    text = blocks_text(status.body["blocks"])
    everything = json.dumps(mask_data([c.body for c in slack_bot.recorder.calls]), default=str)
    assert "7.65 MB" not in everything and str(SECRET_SIZE) not in everything  # its size, as status writes it
    assert f"{models}/leak/id_ed25519 — unknown (" in text and "through a symbolic link out of" in text, text
    assert ": not measured)" in text, text
    assert str(outside) not in everything  # nor where the link leads
    assert f"{models}/qwen — " in text and f"{models}/qwen — unknown" not in text, text  # measured
    assert (outside / "id_ed25519").stat().st_size == SECRET_SIZE
