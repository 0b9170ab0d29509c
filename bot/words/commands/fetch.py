"""``fetch HOST ORG/NAME [revision=REV] [to=PATH] [include=GLOB…]``: download a model's weights on the host.

Every value is checked here before anything reaches a host: the repo id as the Hub spells one, a
revision of branch/tag/commit characters, an absolute path without control characters, glob
patterns of ordinary file-name characters and ``*?[]``.
"""

from __future__ import annotations

import re

from bot.flows.actions.kinds import ActionKind, ActionSpec
from bot.foundation.errors import UsageError
from bot.foundation.names import validate_host, validate_path
from bot.foundation.roles import Role
from bot.words.commands.grammar import CommandSpec, split_options

FETCH_USAGE = "fetch HOST ORG/NAME [revision=REV] [to=PATH] [include=GLOB...]"
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}\Z")
GLOB_RE = re.compile(r"^[A-Za-z0-9._*?\[\]/-]{1,200}\Z")
MAX_GLOBS = 20


def parse_fetch(args: list[str]) -> ActionSpec:
    globs: list[str] = []
    rest: list[str] = []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key.lower() == "include":
            globs += [g for g in value.split(",") if g]
        else:
            rest.append(a)
    opts, words = split_options(rest, ["revision", "to"], FETCH_USAGE)
    if not words:
        raise UsageError("name the host and the repo (`ORG/NAME`)", usage=FETCH_USAGE)
    if len(words) < 2:
        raise UsageError("name the repo to fetch (`ORG/NAME`)", usage=FETCH_USAGE)
    if len(words) > 2:
        raise UsageError(f"unexpected argument `{words[2][:60]}`", usage=FETCH_USAGE)
    host, repo = validate_host(words[0]), words[1]
    if not REPO_RE.match(repo):
        raise UsageError(f"`{repo[:80]}` is not a Hugging Face repo id (`ORG/NAME`)", usage=FETCH_USAGE)
    revision = opts.get("revision")
    if revision is not None and (not REVISION_RE.match(revision) or ".." in revision):
        raise UsageError(f"`{revision[:80]}` is not a branch, tag or commit", usage=FETCH_USAGE)
    target = validate_path(opts["to"]) if "to" in opts else None
    if target is not None and target.rstrip("/") == "":
        raise UsageError("`to=/` is not a folder to download into", usage=FETCH_USAGE)
    if len(globs) > MAX_GLOBS:
        raise UsageError(f"at most {MAX_GLOBS} include= patterns", usage=FETCH_USAGE)
    bad = [g for g in globs if not GLOB_RE.match(g) or ".." in g]
    if bad:
        raise UsageError(f"`{bad[0][:80]}` is not a file pattern (letters, digits, . _ - / * ? [ ])", usage=FETCH_USAGE)
    return ActionSpec(
        ActionKind.FETCH,
        host,
        repo=repo,
        revision=revision,
        target=target.rstrip("/") if target else None,
        include=tuple(dict.fromkeys(globs)),
    )


FETCH = CommandSpec(
    ("fetch",),
    FETCH_USAGE,
    "plan downloading a model's weights on the host with its own huggingface_hub; progress, verify, offer the pivot",
    Role.OPERATOR,
    parse_fetch,
)
