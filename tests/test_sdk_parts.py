"""The SDK internals behind gateway/sdk.py still look as that module expects."""

from __future__ import annotations

from mcp.server.connection import Connection

from gateway.sdk import CONNECTION_ATTRIBUTES, connection_like

INFO = {"name": "client", "version": "1"}
CAPABILITIES = {"elicitation": {}, "roots": {"listChanged": True}}


def test_a_connection_like_a_model_is_what_from_envelope_builds() -> None:
    """A copy of a 2026-07-28 connection equals a new one for the same envelope, and owns its
    state and exit stack: an SDK release that sets another attribute in ``__init__`` fails here."""
    model = Connection.from_envelope("2026-07-28", INFO, CAPABILITIES)
    assert set(vars(model)) == CONNECTION_ATTRIBUTES
    new = Connection.from_envelope("2026-07-28", INFO, CAPABILITIES)
    copy = connection_like(model)
    assert set(vars(copy)) == CONNECTION_ATTRIBUTES
    for name in ("outbound", "protocol_version", "session_id", "client_params", "client_capabilities"):
        assert getattr(copy, name) == getattr(new, name), name
    assert copy.client_params is not None and copy.client_params.client_info.name == "client"
    assert copy.initialized.is_set() and copy.state == {} and copy.state is not model.state
    assert copy.exit_stack is not model.exit_stack
    model.state["x"] = 1
    assert "x" not in copy.state


def test_the_oauth_provider_picks_its_authorization_server_through_the_hook_gateway_sdk_sets() -> None:
    """``choose_authorization_server`` replaces the provider's ``_select_authorization_server``,
    which its flow calls with the protected-resource metadata's list (strings) for the server
    whose metadata it fetches next: an SDK release that renames or stops calling it fails here."""
    import inspect

    from mcp.client.auth import OAuthClientProvider

    from gateway.sdk import choose_authorization_server

    flow = inspect.getsource(OAuthClientProvider)
    assert "self.context.auth_server_url = self._select_authorization_server(" in flow
    assert "[str(url) for url in prm.authorization_servers]" in flow
    provider = object.__new__(OAuthClientProvider)
    choose_authorization_server(provider, lambda advertised: advertised[-1])
    assert provider._select_authorization_server(["a", "b"]) == "b"  # noqa: SLF001
