"""Prove the Slack test harness works against the real slack_sdk / slack_bolt."""

import json
import time

import pytest
import pytest_asyncio
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from tests.support.blockkit import blocks_text, validate_message
from tests.support.slack_recorder import SlackApiRecorder
from tests.support.slack_requests import (
    block_action_body,
    signed_headers,
    slash_command_body,
    socket_mode_envelope,
)

SECRET = "test-signing-secret"
BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "GPU status"}},
    {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "*gpu0* idle"},
        "accessory": {
            "type": "button",
            "action_id": "claim",
            "value": "gpu0",
            "text": {"type": "plain_text", "text": "Claim"},
        },
    },
]


@pytest_asyncio.fixture
async def recorder():
    async with SlackApiRecorder() as r:
        yield r


@pytest.fixture
def client(recorder):
    return AsyncWebClient(token="xoxb-test", base_url=recorder.url)


@pytest.fixture
def app(client):
    # Bolt ignores `token=` when `client=` is given: the token must be on the client.
    app = AsyncApp(client=client, signing_secret=SECRET, request_verification_enabled=True)

    @app.command("/gpu")
    async def gpu(ack, command, respond, client):
        await ack(f"working on `{command['text']}`")
        await client.chat_postMessage(channel=command["channel_id"], text="status", blocks=BLOCKS)
        await respond(text="done", replace_original=False)

    @app.action("claim")
    async def claim(ack, body, respond):
        await ack()
        await respond(text=f"claimed {body['actions'][0]['value']} by <@{body['user']['id']}>")

    return app


def dispatch(app, body, secret=SECRET, timestamp=None):
    return app.async_dispatch(AsyncBoltRequest(body=body, headers=signed_headers(body, secret, timestamp)))


@pytest.mark.asyncio
async def test_post_message_is_recorded_decoded(recorder, client):
    resp = await client.chat_postMessage(channel="C1", text="fallback", blocks=BLOCKS)
    assert resp["ok"] and resp["channel"] == "C1"
    call = await recorder.wait_for("chat.postMessage")
    assert call.body["blocks"] == BLOCKS and call.token == "xoxb-test"
    resp2 = await client.chat_postMessage(channel="C1", text="again")
    assert float(resp2["ts"]) > float(resp["ts"]) and resp["ts"] == "1700000000.000100"


@pytest.mark.asyncio
async def test_form_encoded_and_get_methods(recorder, client):
    await client.api_call("chat.postMessage", data={"channel": "C1", "blocks": json.dumps(BLOCKS)})
    assert recorder.calls_of("chat.postMessage")[0].body["blocks"] == BLOCKS
    recorder.usergroups = {"S123": ["U1", "U2"]}
    assert (await client.usergroups_users_list(usergroup="S123"))["users"] == ["U1", "U2"]
    assert (await client.users_info(user="U1"))["user"]["id"] == "U1"
    assert (await client.conversations_info(channel="C9"))["channel"]["id"] == "C9"
    assert (await client.auth_test())["user_id"] == "UBOT"
    assert (await client.chat_update(channel="C1", ts="1.2", text="x"))["ts"] == "1.2"
    assert "message_ts" in await client.chat_postEphemeral(channel="C1", user="U1", text="x")
    assert (await client.views_open(trigger_id="t", view={"type": "modal"}))["view"]["id"]
    with pytest.raises(SlackApiError, match="unknown_method"):
        await client.api_call("nope.nothing", data={})
    with pytest.raises(SlackApiError, match="not_authed"):
        await AsyncWebClient(base_url=recorder.url).auth_test()
    assert [c.method for c in recorder.calls][-2:] == ["nope.nothing", "auth.test"]


@pytest.mark.asyncio
async def test_files_upload_v2_round_trip(recorder, client):
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    resp = await client.files_upload_v2(content=data, filename="x.png", channel="C1", title="plot")
    file_id = resp["file"]["id"]
    assert recorder.uploads[file_id] == data
    complete = recorder.calls_of("files.completeUploadExternal")[0]
    assert complete.body["channel_id"] == "C1" and complete.body["files"][0]["id"] == file_id


@pytest.mark.asyncio
async def test_slash_command_through_bolt(recorder, app):
    body = slash_command_body("status", response_url=recorder.response_url("cmd1"))
    resp = await dispatch(app, body)
    assert resp.status == 200 and "working on `status`" in resp.body
    posted = await recorder.wait_for("chat.postMessage")
    validate_message(posted.body["blocks"], posted.body["text"])
    assert "gpu0" in blocks_text(posted.body["blocks"])
    responded = await recorder.wait_for("response_url")
    assert responded.body["text"] == "done" and responded.path.endswith("/cmd1")


@pytest.mark.asyncio
async def test_block_action_through_bolt(recorder, app):
    body = block_action_body("claim", "gpu0", user_id="U7", response_url=recorder.response_url("a1"))
    assert (await dispatch(app, body)).status == 200
    call = await recorder.wait_for("response_url", lambda c: "claimed" in c.body["text"])
    assert call.body["text"] == "claimed gpu0 by <@U7>"


@pytest.mark.asyncio
async def test_bad_signature_and_stale_timestamp_are_rejected(recorder, app):
    body = slash_command_body("status")
    assert (await dispatch(app, body, secret="wrong")).status == 401
    assert (await dispatch(app, body, timestamp=int(time.time()) - 6 * 60)).status == 401
    assert recorder.calls_of("chat.postMessage") == []


@pytest.mark.asyncio
async def test_socket_mode_envelopes(recorder, app):
    env = socket_mode_envelope("slash_commands", slash_command_body("ls", response_url=recorder.response_url()))
    req = SocketModeRequest.from_dict(env)
    assert req is not None and req.accepts_response_payload
    resp = await app.async_dispatch(AsyncBoltRequest(body=req.payload, mode="socket_mode"))
    assert resp.status == 200 and "working on `ls`" in resp.body
    env = socket_mode_envelope("interactive", block_action_body("claim", "gpu3", response_url=recorder.response_url()))
    assert env["payload"]["type"] == "block_actions"
    resp = await app.async_dispatch(AsyncBoltRequest(body=env["payload"], mode="socket_mode"))
    assert resp.status == 200
    await recorder.wait_for("response_url", lambda c: "gpu3" in c.body.get("text", ""))


def test_validate_message_limits():
    validate_message(BLOCKS, "ok")
    divider = {"type": "divider"}
    with pytest.raises(AssertionError, match="51 blocks > 50"):
        validate_message([divider] * 51)
    dup = BLOCKS + [{"type": "actions", "elements": [BLOCKS[1]["accessory"]]}]
    with pytest.raises(AssertionError, match="duplicate action_id 'claim'"):
        validate_message(dup)
    long_button = {
        "type": "actions",
        "elements": [{"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "x" * 76}}],
    }
    with pytest.raises(AssertionError, match=r"blocks\[0\].elements\[0\].text.text"):
        validate_message([long_button])
    with pytest.raises(AssertionError, match="plain_text"):
        validate_message([{"type": "header", "text": {"type": "mrkdwn", "text": "hi"}}])
    with pytest.raises(AssertionError, match="3001 > 3000"):
        validate_message([{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}])
    with pytest.raises(AssertionError, match="text: length 40001"):
        validate_message([], "x" * 40001)
