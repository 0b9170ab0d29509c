"""The ``nvidia-smi --query-gpu`` command that survives drivers which do not know every field.

nvidia-smi refuses the whole query when one field is unknown to the driver: exit 2 and, on
**stdout**, ``Field "x" is not a valid field to query.`` naming only the *first* unknown field
(tests/fixtures/h200/badfield.out, badfield_two.out). The command below asks again without each
refused *optional* field (or with its older name, :data:`~bot.probing.probes.gpu_health.FIELD_FALLBACKS`)
until the driver answers, and prints first::

    # fields: index,uuid,...        the list that answered (the parser reads columns by it)
    # unsupported: a,b              the fields this host's driver refused (only when any)

A refused field that is not optional (``index``, ``uuid``...) ends the loop: the query's own
failure is then reported as it came.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping

SMI_QUERY = "nvidia-smi --format=csv,noheader,nounits --query-gpu="


HELP_TIMEOUT_S = 5
"""How long ``nvidia-smi --help-query-gpu`` may take (it prints the driver's field list without asking a GPU)."""


def retry_query_command(
    fields: Iterable[str],
    *,
    optional: Iterable[str],
    fallbacks: Mapping[str, str],
    if_known: Mapping[str, Iterable[str]] | None = None,
) -> str:
    """A POSIX ``sh`` command: ``--query-gpu=<fields>``, retried without each refused field of
    ``optional`` (replaced by ``fallbacks[field]`` where given, which is then optional too).

    ``if_known`` maps a field to the older fields that stand for it where the driver refuses it; they are
    asked only where this driver lists them in ``nvidia-smi --help-query-gpu`` (read then, and only then):
    ``gpu_recovery_action`` refused (drivers before 570) -> ``reset_status.*`` where that driver knows
    them. A driver that knows the field costs no extra call; one whose help could not be read is asked
    for none of them.

    At most one retry per optional field. Exit status: nvidia-smi's last one.
    """
    names = list(fields)
    known = {k: list(v) for k, v in (if_known or {}).items()}
    drop = list(dict.fromkeys([*optional, *fallbacks.values(), *(f for v in known.values() for f in v)]))
    for name in [*names, *drop, *known]:
        if not re.fullmatch(r"[A-Za-z0-9_.]+", name):
            raise ValueError(f"not a query field name: {name!r}")
    q = shlex.quote
    alt_cases = " ".join(f"{q(k)}) alt={q(v)};;" for k, v in fallbacks.items())
    help_cases = "".join(
        f"  case $bad in {q(k)}) h=$(timeout {HELP_TIMEOUT_S} nvidia-smi --help-query-gpu 2>/dev/null </dev/null)\n"
        f'    for y in {" ".join(v)}; do case $h in *"\\"$y\\""*) alt="$alt${{alt:+,}}$y";; esac; done;; esac\n'
        for k, v in known.items()
    )
    return f"f={q(','.join(names))}; miss=''; n=0\n" + (
        "while :; do\n"
        f'  out=$({SMI_QUERY}"$f"); rc=$?\n'
        '  bad=$(printf \'%s\\n\' "$out" | sed -n \'s/^Field "\\(.*\\)" is not a valid field to '
        "query\\..*/\\1/p' | head -n 1)\n"
        f'  [ $rc -eq 2 ] && [ -n "$bad" ] && [ $n -lt {len(drop) + 1} ] || break\n'
        f'  case " {" ".join(drop)} " in *" $bad "*) ;; *) break;; esac\n'
        '  case ",$f," in *",$bad,"*) ;; *) break;; esac\n'
        f"  alt=''; case $bad in {alt_cases} *) ;; esac\n" + help_cases + "  nf=''\n"
        "  for x in $(printf '%s' \"$f\" | tr ',' ' '); do\n"
        '    [ "$x" = "$bad" ] && x=$alt\n'
        '    [ -n "$x" ] && nf="$nf${nf:+,}$x"\n'
        "  done\n"
        '  f=$nf; miss="$miss${miss:+,}$bad"; n=$((n + 1))\n'
        "done\n"
        'echo "# fields: $f"\n'
        '[ -z "$miss" ] || echo "# unsupported: $miss"\n'
        "printf '%s\\n' \"$out\"\n"
        "exit $rc\n"
    )


def unsupported_fields(stdout: str) -> list[str]:
    """The fields the ``# unsupported:`` line names (``[]`` when there is none)."""
    for line in stdout.splitlines() if "# unsupported:" in stdout else ():
        if line.startswith("# unsupported:"):
            return [f.strip() for f in line.split(":", 1)[1].split(",") if f.strip()]
    return []
