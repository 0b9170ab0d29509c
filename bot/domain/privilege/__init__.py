"""Least privilege on GPU hosts: what the bot may do there, and how it raises privilege.

Probes never need privilege. Changes run as root when the bot logs in as root (nothing to
configure), as the bot user itself when it may (a weight folder it can delete, its own
process), and otherwise through ``sudo -n`` for exactly: ``systemctl stop|start|restart -- UNIT``
of the host's configured units, and the product's root-owned helper ``gpubot-priv`` (``kill`` of a
planned GPU process, ``delete`` of a planned path under an allowed root pinned in sudoers).

* :mod:`bot.domain.privilege.sudoers`: the exact sudo command lines, the sudoers file for a host, and a
  reader of ``sudo -n -l -l`` (pure);
* :mod:`bot.domain.privilege.rights`: one read-only round trip that says, for each needed command,
  whether it runs as root, as the bot user, through sudo, or not at all (and the fix);
* ``gpubot-priv.sh``: the helper itself (``gpubot hosts helper`` prints it).
"""
