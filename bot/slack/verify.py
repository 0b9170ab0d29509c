"""The signature check of HTTP-mode requests, before anything else of the app runs.

Bolt's own check (``AsyncRequestVerification``) hands a non-integer ``X-Slack-Request-Timestamp``
(``x``, ``""``, ``1796160073.5``) to slack_sdk's verifier, which raises ``ValueError``; Bolt then calls
the app's error handler with the unverified body, whose ``response_url`` is anybody's address. This
check answers 401 to a request with a missing or malformed timestamp or signature, or a signature
that does not match, without calling any handler or the error handler, and marks a request that
passed (:data:`VERIFIED`) so that the error handler answers only those. A refusal is logged as one
WARNING line, at most once a minute (with how many were refused since the last one), never with
the body or a traceback.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger("gpubot.slack")

VERIFIED = "gpubot_request_verified"  # in Bolt's context: the request passed the check (or needs none)
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
MAX_AGE_S = 5 * 60  # as Slack says and Bolt does


class RefusalLog:
    """One WARNING line per ``interval_s`` at most, counting the refusals in between."""

    def __init__(self, *, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self._clock = interval_s, clock
        self._last: float | None = None
        self._since = 0

    def refused(self, reason: str) -> None:
        self._since += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        count, self._since, self._last = self._since, 0, now
        log.warning(
            "refused %d request(s) on the Slack events path with HTTP 401 (last: %s; at most one such line a minute)",
            count,
            reason,
        )


def why_unverified(
    verifier: SignatureVerifier, body: str, timestamp: str | None, signature: str | None, now: float
) -> str | None:
    """``None`` when the request is Slack's, else why not (a few words, nothing of the request)."""
    if timestamp is None or signature is None:
        return "no signature headers"
    if not _TIMESTAMP.fullmatch(timestamp):
        return "malformed timestamp"
    if not _SIGNATURE.fullmatch(signature):
        return "malformed signature"
    if abs(now - int(timestamp)) > MAX_AGE_S:
        return "stale timestamp"
    if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
        return "bad signature"
    return None


class SignedRequests(AsyncMiddleware):
    """The app's first check after Bolt's ``ssl_check`` (given to Bolt as ``before_authorize``, with
    Bolt's own verification off). ``signing_secret=None``: the transport is trusted (Socket Mode, the
    console), every request passes."""

    def __init__(self, signing_secret: str | None, *, refusals: RefusalLog | None = None) -> None:
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.refusals = refusals or RefusalLog()

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        if self._verifier is not None and req.mode != "socket_mode":
            why = why_unverified(
                self._verifier,
                req.raw_body,
                _header(req, "x-slack-request-timestamp"),
                _header(req, "x-slack-signature"),
                time.time(),
            )
            if why is not None:
                self.refusals.refused(why)
                return BoltResponse(status=401, body={"error": "invalid request"})
        req.context[VERIFIED] = True
        return await next()


def _header(req: AsyncBoltRequest, name: str) -> str | None:
    values = req.headers.get(name) or []
    return values[0] if values else None
