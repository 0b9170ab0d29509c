"""``gpubot console``: type ``/gpu …`` lines; the real Bolt app answers through a local Web API
stand-in, and its messages are shown as text (buttons as numbered choices).

Who is typing is session state of the :class:`Console` (``user_id``, put in every stand-in request),
never a change to the shared :class:`~bot.foundation.config.Settings`: they are copied
(:meth:`~bot.foundation.config.Settings.updated`) where the console needs others (:func:`console_settings`,
:func:`sharing_roles`)."""

from __future__ import annotations

import asyncio
import difflib
import itertools
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.flows.services import Services
from bot.foundation.config import Settings, default_data_dir
from bot.foundation.errors import UsageError
from bot.foundation.roles import Role
from bot.slack.actions.handlers import sweep_once
from bot.slack.app import build_app
from bot.slack.console.demo import Demo, active_demo
from bot.slack.console.foreground import own_foreground
from bot.slack.console.render import Choice, button_key, button_line, render_message
from bot.slack.console.standin import WebApiStandIn
from bot.slack.metered import MeteredWebClient
from bot.slack.routes import command_grammar

CONSOLE_USER = "UCONSOLE"
CONSOLE_CHANNEL = "CCONSOLE"
ROLE_FIELDS = {"admin": "admins", "operator": "operators", "viewer": "viewers"}
"""Role label -> the settings field listing its Slack ids."""
USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}\Z")
BANNER = (
    "gpubot console — type `/gpu help` (or just `help`), a number to press a button, `quit` to leave,\n"
    "`as NAME` to act as another person (with your role, never more; e.g. to approve your own request), "
    "`as me` to be yourself.\n"
    "Messages are what Slack would show; nothing is sent to Slack. An update shows only the lines that changed."
)


def changed_lines(before: str, after: str, buttons_gone: Collection[str] = ()) -> str:
    """What an update changed, for a message already on screen: its first line (to say which
    message), then each new or changed line, and ``(gone)`` for lines that disappeared (in a
    changed run, the old lines beyond the new ones) and for each line of ``buttons_gone`` (buttons
    the update removed: they must read as gone wherever they were). Underlines (``====``, ``----``)
    are left out. When the two share no line, the whole new text, then the buttons gone."""
    old, new = before.splitlines(), after.splitlines()
    must = {b.strip() for b in buttons_gone}
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    if not any(not _rule(old[m.a]) for m in matcher.get_matching_blocks() if m.size):
        return "\n".join([after, *(f"  (gone) {b.strip()}" for b in buttons_gone)])  # a placeholder became the answer
    out = [new[0] if new else "(now empty)"]
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        out += [f"  {new[j].strip()}" for j in range(max(j1, 1), j2) if not _rule(new[j])]
        paired = [x for x in old[i1 : i1 + (j2 - j1)] if x.strip() in must]
        out += [f"  (gone) {x.strip()}" for x in [*paired, *old[i1 + (j2 - j1) : i2]] if not _rule(x)]
    if len(out) == 1:
        out.append("  (nothing visible changed)")
    return "\n".join(out)


def _rule(line: str) -> bool:
    return not line.strip() or set(line.strip()) <= {"=", "-"}


def console_settings(settings: Settings, *, role: str, user_id: str = CONSOLE_USER) -> Settings:
    """A copy of ``settings`` where ``user_id`` also has ``role`` (``admin``, ``operator`` or
    ``viewer``); ``settings`` is not changed. Raises :class:`KeyError` for another role."""
    field = ROLE_FIELDS[role]
    return settings.updated(**{field: [*getattr(settings.roles, field), user_id]})


def sharing_roles(settings: Settings, home: str, people: Iterable[str]) -> Settings:
    """A copy of ``settings`` where each of ``people`` is in every role list ``home`` is in
    (``settings`` itself when that changes nothing; it is never changed)."""
    people = list(people)
    roles = settings.roles
    update: dict[str, list[str]] = {}
    for field in ROLE_FIELDS.values():
        ids: list[str] = getattr(roles, field)
        extra = [p for p in people if p not in ids]
        if home in ids and extra:
            update[field] = [*ids, *extra]
    return settings.updated(**update) if update else settings


class Console:
    """One console session. ``write`` receives each rendered message (default ``print``).

    Session state: ``home_id`` (you), ``user_id`` (who you act as now: the user of every command
    and click sent), ``people`` (the others you acted as, who share your roles). ``services`` are
    the ones given, with settings where ``people`` share your roles (:func:`sharing_roles`); acting
    as someone new builds the app again on such a copy, so the settings given are never changed.

    ``home_role`` (your role in the settings given, e.g. ``--role viewer``) is the most anyone gets
    here: a name typed after ``as`` proves nothing, so ``as U0ADMIN`` acts with your role even when
    the settings or the database make that Slack id an admin, and an approval rule that names
    people (or user groups) is met by no one typed here (the app is built with ``console_role``)."""

    def __init__(
        self,
        services: Services,
        *,
        user_id: str = CONSOLE_USER,
        write: Callable[[str], None] = print,
        files_dir: str | None = None,
        demo: Demo | None = None,
    ):
        self.home_services = services
        self.services = services
        self.home_id = user_id
        self.user_id = user_id
        self.people: tuple[str, ...] = ()
        self.write = write
        self.files_dir = files_dir or os.path.join(default_data_dir(), "console-files")
        self.standin = WebApiStandIn(self._show)
        self.choices: dict[int, tuple[Choice, dict[str, Any], str | None]] = {}
        """Button number -> the button, the message it is on, and that message's key: only buttons
        on screen now (an update or removal of their message takes them away)."""
        self.screens: dict[str, str] = {}
        """Message key -> its text as last shown, so an update prints only what changed."""
        self._buttons: dict[str, list[int]] = {}
        """Message key -> the numbers of its buttons on screen."""
        self._clicked: dict[str, str] = {}
        """``response_url`` key of a click -> the key of the message clicked."""
        self._next_choice = 1
        self._unkeyed = itertools.count(1)
        self.demo = demo
        """The console's demo when it is on: a command it refuses is answered here, never sent."""
        self.home_role = self._listed_role(user_id)
        """Your role from the settings given: the ceiling of every identity in this console."""
        self.app: Any = None
        self.client: AsyncWebClient | None = None

    async def start(self) -> None:
        await self.standin.start()
        self.client = MeteredWebClient(token="xoxb-console", base_url=self.standin.api_url)  # masks what it sends
        self.app = build_app(
            self.services, client=self.client, process_before_response=True, console_role=self.home_role
        )
        await sweep_once(
            self.services, self.client
        )  # as `gpubot serve` does before it listens: due cards, cut-off actions

    async def stop(self) -> None:
        await self.standin.stop()

    async def _show(self, kind: str, message: dict[str, Any]) -> None:
        if kind == "file":
            self.write(self._save_files(message))
            return
        key = self._message_key(kind, message)
        if kind == "delete":
            shown = self.screens.pop(key or "", None)
            self._drop_buttons(key)
            first = shown.strip().splitlines()[0] if shown and shown.strip() else "a message"
            self.write(f"\n(removed) {first}\n")
            return
        old = {button_key(c): n for n in self._buttons.get(key or "", []) for c in [self.choices[n][0]]}
        text, choices = render_message(message.get("blocks"), message.get("text"), self._next_choice, old)
        if key is None and choices:  # an ephemeral message with buttons: a click may replace it
            key = f"unkeyed.{next(self._unkeyed)}"
        gone = self._drop_buttons(key, keep={c.number for c in choices})
        for c in choices:
            self.choices[c.number] = (c, message, key)
            self._next_choice = max(self._next_choice, c.number + 1)
        before = self.screens.get(key) if key else None
        if key:
            self.screens[key] = text
            if choices:
                self._buttons[key] = [c.number for c in choices]
        tags = {"post": [], "update": ["(updated)"], "ephemeral": ["(only you)"], "replace": ["(updated)"]}[kind]
        if message.get("thread_ts"):
            tags.append("(in thread)")
        if before is not None and kind in ("update", "replace"):
            text = changed_lines(before, text, [button_line(c) for c in gone])
        self.write("\n" + " ".join([*tags, text]).rstrip() + "\n")

    def _drop_buttons(self, key: str | None, keep: Collection[int] = ()) -> list[Choice]:
        """Take the buttons of message ``key`` off the screen, but those numbered in ``keep``; the
        buttons taken off, in their order."""
        return [self.choices.pop(n)[0] for n in self._buttons.pop(key or "", []) if n not in keep]

    def _message_key(self, kind: str, message: dict[str, Any]) -> str | None:
        """Which on-screen message this is: its ``ts``, or for a click's ``response_url`` the
        message the click came from."""
        if kind in ("post", "update", "delete"):
            return str(message.get("ts") or "") or None
        if kind == "replace":
            return self._clicked.get(str(message.get("response_key")))
        return None

    def _save_files(self, message: dict[str, Any]) -> str:
        """Write uploaded files (charts) under ``files_dir``; say where, with their titles."""
        os.makedirs(self.files_dir, exist_ok=True)
        lines = []
        for f in message.get("files", []):
            name = os.path.basename(f.get("filename") or "") or f"{f.get('id') or 'file'}.bin"
            path = os.path.join(self.files_dir, name)
            content: bytes = f.get("content") or b""
            with open(path, "wb") as out:
                out.write(content)
            lines.append(f"{f.get('title') or name}: saved to {path} ({len(content):,} bytes)")
        thread = " (in thread)" if message.get("thread_ts") else ""
        return f"\n(file){thread} " + "\n".join(lines) + "\n"

    def role(self) -> Role:
        """The role of the person typing: from the settings lists (a viewer when viewers are open),
        never above :attr:`home_role`."""
        return min(self._listed_role(self.user_id), self.home_role)

    def _listed_role(self, user_id: str) -> Role:
        roles = self.services.settings.roles
        return next(
            (
                role
                for role, ids in (
                    (Role.ADMIN, roles.admins),
                    (Role.OPERATOR, roles.operators),
                    (Role.VIEWER, roles.viewers),
                )
                if user_id in ids
            ),
            Role.VIEWER if not roles.viewers else Role.NONE,
        )

    def who(self) -> str:
        """``UCONSOLE (admin)``: the person typing and their role from the settings lists."""
        role = self.role()
        return f"{self.user_id} ({role.label if role is not Role.NONE else 'no role'})"

    def act_as(self, name: str | None) -> None:
        """Act as another console person, who gets the same roles as you and never more (the
        settings or grants of a Slack id typed here count up to :attr:`home_role` only); ``None``
        or ``me`` goes back to yourself. A Slack user ID (``U…``/``W…``) is used as it is; any other
        name becomes ``UCONSOLE<NAME>``."""
        if name is None or name.lower() in ("me", "myself", "self"):
            new_id = self.home_id
        elif USER_ID.match(name):
            new_id = name
        else:
            new_id = self.home_id + "".join(c for c in name.upper() if c.isalnum())[:20]
        if new_id != self.home_id and new_id not in self.people:
            self.people = (*self.people, new_id)
            settings = sharing_roles(self.home_services.settings, self.home_id, self.people)
            if settings is not self.services.settings:
                self.services = replace(self.home_services, settings=settings)
                if self.client is not None:
                    self.app = build_app(
                        self.services, client=self.client, process_before_response=True, console_role=self.home_role
                    )
        self.user_id = new_id
        if new_id == self.home_id:
            self.write(f"now acting as yourself, {self.who()}\n")
        else:
            self.write(f"now acting as {self.who()}; `as me` goes back to {self.home_id}\n")

    def _slash_body(self, text: str) -> str:
        return urlencode(
            {
                "token": "console",
                "team_id": "TCONSOLE",
                "team_domain": "console",
                "channel_id": CONSOLE_CHANNEL,
                "channel_name": "console",
                "user_id": self.user_id,
                "user_name": "console",
                "command": self.services.settings.slack.command,
                "text": text,
                "api_app_id": "ACONSOLE",
                "response_url": self.standin.response_url(uuid.uuid4().hex),
                "trigger_id": f"console.{uuid.uuid4().hex}",
            }
        )

    def _click_body(self, choice: Choice, message: dict[str, Any], key: str | None) -> str:
        ts = message.get("ts") or message.get("message_ts") or ""
        response_key = uuid.uuid4().hex
        if key:
            self._clicked[response_key] = key
        payload = {
            "type": "block_actions",
            "user": {"id": self.user_id, "username": "console", "team_id": "TCONSOLE"},
            "api_app_id": "ACONSOLE",
            "token": "console",
            "team": {"id": "TCONSOLE", "domain": "console"},
            "container": {"type": "message", "message_ts": ts, "channel_id": CONSOLE_CHANNEL, "is_ephemeral": not ts},
            "channel": {"id": CONSOLE_CHANNEL, "name": "console"},
            "trigger_id": f"console.{uuid.uuid4().hex}",
            "message": {"ts": ts, "text": message.get("text", ""), "blocks": message.get("blocks", [])},
            "response_url": self.standin.response_url(response_key),
            "actions": [
                {
                    "type": "button",
                    "action_id": choice.action_id,
                    "block_id": choice.block_id or "b",
                    "value": choice.value,
                    "text": {"type": "plain_text", "text": choice.label},
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }
        return urlencode({"payload": json.dumps(payload)})

    async def _dispatch(self, body: str) -> None:
        req = AsyncBoltRequest(body=body, headers={"content-type": ["application/x-www-form-urlencoded"]})
        await self.app.async_dispatch(req)

    async def command(self, text: str) -> None:
        """Run ``/gpu text`` as if typed in Slack (unless the demo refuses it: then say why, only to you)."""
        if self.demo is not None:
            try:
                parsed = command_grammar(self.services.settings.slack.command).parse(text)
            except UsageError:
                pass  # the app answers it
            else:
                refusal = self.demo.refusal(parsed.command)
                if refusal:
                    self.write(f"\n(only you) [!] {refusal}\n")
                    return
        await self._dispatch(self._slash_body(text))

    def choice(self, number: int) -> Choice | None:
        found = self.choices.get(number)
        return found[0] if found else None

    async def press(self, number: int) -> None:
        """Press button ``number``; raises ``KeyError`` for an unknown number."""
        choice, message, key = self.choices[number]
        await self._dispatch(self._click_body(choice, message, key))

    async def handle_line(self, line: str, confirm: Callable[[str], bool] | None = None) -> bool:
        """Run one typed line; returns False when the user wants to leave."""
        line = line.strip()
        if not line:
            return True
        if line in ("quit", "exit", "/quit"):
            return False
        words = line.split()
        if words[0] == "as":
            if len(words) > 2:
                self.write("usage: `as NAME` to act as someone else, `as me` (or `as`) to be yourself again\n")
            else:
                self.act_as(words[1] if len(words) == 2 else None)
            return True
        if line.isdigit():
            c = self.choice(int(line))
            if c is None:
                self.write(f"no button [{line}] on screen\n")
                return True
            if c.confirm and confirm is not None and not confirm(c.confirm):
                self.write("cancelled\n")
                return True
            await self.press(int(line))
            return True
        cmd = self.services.settings.slack.command
        for prefix in (cmd, cmd.lstrip("/")):
            if line == prefix or line.startswith(prefix + " "):
                line = line[len(prefix) :].strip()
                break
        text = line
        await self.command(text)
        return True


async def run_console(services: Services, *, note: str | None = None) -> int:
    """:func:`_run_console` with the terminal's foreground to itself
    (:func:`~bot.slack.console.foreground.own_foreground`): a Ctrl-C reaches the console, not ``make``."""
    with own_foreground():
        return await _run_console(services, note=note)


async def _run_console(services: Services, *, note: str | None = None) -> int:
    """The interactive loop on stdin/stdout; ``note`` is printed under the banner. While the demo
    is on, the demo's banner is printed instead, for your role (a viewer is not offered the clean).

    Ctrl-C as in a shell: at the prompt it drops the line typed and prompts again (the reading
    thread goes on reading: the terminal threw the line away); while a line runs it cancels it and
    says ``(cancelled)``; at a ``[y/N]`` question it answers no. Ctrl-D or ``quit`` leaves."""
    console = Console(services, demo=active_demo(services.settings.actions))
    await console.start()
    print(BANNER)
    if console.demo is not None:
        note = console.demo.banner(services.settings.slack.command, may_clean=console.role() >= Role.OPERATOR)
    if note:
        print(note)

    loop = asyncio.get_running_loop()
    running: asyncio.Task[bool] | None = None

    def interrupt() -> None:
        if running is not None and not running.done():
            running.cancel()
        else:
            print("\ngpubot> ", end="", flush=True)

    def confirm(question: str) -> bool:
        loop.remove_signal_handler(signal.SIGINT)  # the question blocks the loop: Ctrl-C raises in input()
        try:
            return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
        except KeyboardInterrupt:
            print()
            return False
        finally:
            loop.add_signal_handler(signal.SIGINT, interrupt)

    loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        while True:
            try:
                line = await asyncio.to_thread(input, "gpubot> ")
            except EOFError:
                print()
                return 0
            running = asyncio.create_task(console.handle_line(line, confirm))
            await asyncio.wait([running])
            if running.cancelled():
                print("\n(cancelled)")
            elif not running.result():
                return 0
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await console.stop()
