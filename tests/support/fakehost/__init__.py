"""Fake GPU-host commands installed into :class:`tests.support.sshd.SshTestServer`'s bin dir.

``nvidia-smi`` and ``systemctl`` are stdlib-only scripts; ``gpubot_fake`` is their shared core
(state file format, GPU model). Importable here so tests can compute the same GPU identities.
"""
