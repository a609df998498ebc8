"""Where remote servers' OAuth tokens live and how a user is told to log in: the engine's glue
between the token store (``gateway.state.oauthtokens``) and the downstream connections
(``gateway.downstream.oauth``), which may not import each other."""

from __future__ import annotations

import shlex

from gateway.config import Config, ServerConfig
from gateway.downstream.oauth import Interactive, OAuthSetup
from gateway.state.oauthtokens import TokenFile, TokenFileRefused, TokenRefused, TokensRemoved, TokenStore


def token_file(config: Config, server: ServerConfig) -> TokenFile:
    assert server.url is not None
    return TokenFile(config.gateway.state_dir, server.id, server.url)


def login_command(config: Config, server_id: str) -> str:
    """The exact command to run, ready to paste (the config as an absolute path)."""
    words = ["prefixgate", "login", server_id]
    if config.path is not None:
        words += ["--config", str(config.path.resolve())]
    return shlex.join(words)


def oauth_setup(config: Config, interactive: Interactive | None = None) -> OAuthSetup:
    return OAuthSetup(
        store_for=lambda server: TokenStore(token_file(config, server)),
        login_command=lambda server_id: login_command(config, server_id),
        interactive=interactive,
        refusals=(TokenRefused,),
        removed=(TokensRemoved,),
        unreadable=(TokenFileRefused,),
    )
