"""A 2026-07-28 server's ``input_required`` result, answered for either era of client.

- A modern client answers it itself: the result is passed on with its ``requestState``
  wrapped (``RoundTrips.wrap``) so the retry comes back to the same server; a request the
  client did not declare the capability for is refused here, with a clear error.
- A handshake-era client cannot read ``input_required``: the gateway sends each input
  request over that client's back-channel (the hub's relay, which checks the client's
  capabilities) and retries the server with the answers and its ``requestState``, for
  at most ``max_rounds`` rounds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_REQUEST
from mcp_types.methods import is_input_required
from pydantic import BaseModel, ValidationError

from gateway.engine.capabilities import lacking
from gateway.engine.roundtrip import MAX_ASKS

Ask = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Send one input request to the client; its answer."""
Retry = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""The same request again with ``inputResponses`` and ``requestState``."""
INPUT_REQUESTS: dict[str, type[BaseModel]] = {
    "sampling/createMessage": types.CreateMessageRequest,
    "elicitation/create": types.ElicitRequest,
    "roots/list": types.ListRootsRequest,
}
"""The SDK's type of each input request (``mcp_types.InputRequest``), by method."""


def requests_of(result: Mapping[str, Any], server_id: str) -> dict[str, dict[str, Any]]:
    """The input requests of an ``input_required`` result, checked for shape: each an object
    naming its method, its params (if any) an object, and readable as the SDK's type of that
    request (a client's SDK could not read it: the call would fail there, naming nothing)."""
    requests = result.get("inputRequests") or {}
    if not isinstance(requests, dict) or not all(
        isinstance(r, dict) and isinstance(r.get("method"), str) and isinstance(r.get("params") or {}, dict)
        for r in requests.values()
    ):
        raise MCPError(code=INVALID_REQUEST, message=f"prefixgate: server {server_id!r} sent malformed inputRequests")
    for key, request in requests.items():
        if (model := INPUT_REQUESTS.get(request["method"])) is None:
            continue  # no client answers it: refused as such (``missing_capability``)
        try:
            model.model_validate(request)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, (key, *first["loc"])))
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: server {server_id!r} sent malformed inputRequests: {where}: {first['msg']}",
            ) from None
    return requests


def url_elicitations(exc: MCPError, server_id: str) -> dict[str, Any]:
    """A handshake-era server's ``-32042`` (URL-mode elicitations to complete, then the
    request again) as the ``input_required`` result a 2026-07-28 server would give: that
    era retired the code (its implementations must not send it) and asks the same with an
    ``elicitation/create`` of mode ``url`` per elicitation, without the ``elicitationId`` its
    URL mode does not have (no completion notice follows there). The retry runs the request anew."""
    data = exc.error.data
    listed = data.get("elicitations") if isinstance(data, dict) else None
    if not isinstance(listed, list) or not listed or not all(isinstance(e, dict) for e in listed):
        raise MCPError(
            code=INVALID_REQUEST,
            message=f"prefixgate: server {server_id!r} required URL elicitations it did not name (-32042)",
        )
    asks = {
        f"url-{n}": {"method": "elicitation/create", "params": {k: v for k, v in e.items() if k != "elicitationId"}}
        for n, e in enumerate(listed, 1)
    }
    return {"resultType": "input_required", "inputRequests": asks}


def declined(responses: Any) -> bool:
    """Whether a retry's ``inputResponses`` decline or cancel one of the elicitations asked."""
    if not isinstance(responses, dict):
        return False
    return any(isinstance(r, dict) and r.get("action") in ("decline", "cancel") for r in responses.values())


def missing_capability(requests: Mapping[str, dict[str, Any]], capabilities: Any) -> str | None:
    """The first capability the client lacks for these requests (or the unknown method)."""
    for request in requests.values():
        if (lacked := lacking(request["method"], capabilities, request.get("params"))) is not None:
            return lacked
    return None


async def answer_over_back_channel(
    first: dict[str, Any], server_id: str, ask: Ask, retry: Retry, max_rounds: int
) -> dict[str, Any]:
    """Drive a server's ``input_required`` rounds for a handshake-era client."""
    result = first
    for round_no in range(max_rounds):
        requests = requests_of(result, server_id)
        if len(requests) > MAX_ASKS:
            # Each is a request to the client: as many as a handshake-era server may have open.
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"prefixgate: server {server_id!r} asked for {len(requests)} inputs in one round "
                f"(at most {MAX_ASKS}); gave up",
            )
        if not requests:
            # Only a requestState: the server is not done yet; back off as SDK clients do.
            await anyio.sleep(min(0.05 * 2**round_no, 0.25))
        responses = {
            key: await ask(request["method"], dict(request.get("params") or {})) for key, request in requests.items()
        }
        answers: dict[str, Any] = {"inputResponses": responses}
        if isinstance(result.get("requestState"), str):
            answers["requestState"] = result["requestState"]
        result = await retry(answers)
        if not is_input_required(result):
            return result
    raise MCPError(
        code=INVALID_REQUEST,
        message=f"prefixgate: server {server_id!r} still asked for input after {max_rounds} rounds; gave up",
    )
