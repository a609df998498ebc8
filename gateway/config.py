"""The TOML configuration: discovery, strict validation, ``${VAR}`` expansion.

A bad config must stop the gateway before anything starts, with one line naming the key
path that is wrong; so every key is checked against a table of known keys and types, and
nothing is ever guessed. Values that may hold secrets (``env``, ``headers``, what a
``${VAR}`` puts into ``args``) are never echoed in error messages.

An unset ``${VAR}`` in one server's table is that server's problem, not the config's: the
server is recorded with the variable (``ServerConfig.unset``) and fails alone at start-up,
as a missing command does (``import`` writes such references). A reference that is wrong
in itself (``${1X}``) and an unset variable in ``[gateway]`` still stop everything.
"""

from __future__ import annotations

import codecs
import errno
import importlib.util
import ipaddress
import logging
import os
import re
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from catalog.names import DEFAULT_ENTRY, PROFILES, Profile
from catalog.policy import ClientPolicy, Mode
from catalog.text import escape

DEFAULT_CALL_TIMEOUT = 300.0
"""Seconds a tool call may go without an answer or progress (``call_timeout``)."""
DEFAULT_MAX_CALL_TIME = 3600.0
"""Seconds a tool call may run in all (``max_call_time``; gateway/downstream/calltime.py)."""
DEFAULT_MAX_MESSAGE_BYTES = 32 << 20
MIN_MESSAGE_BYTES = 1 << 16
MIN_NAME_ROOM = 16
"""Characters a wrapping profile must leave for the published name (a shortened one needs 10)."""
SERVER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
"""A profile's name: short and plain, as it is typed on command lines and in URLs."""
PROFILE_ENV = "PREFIXGATE_PROFILE"


class EnvironmentProfile(str):
    """A profile name read from ``$PREFIXGATE_PROFILE`` (not ``--profile``): an unknown one is
    named as the variable's, which a shell may have set long before."""
LOCK_FILE_NAME = "prefixgate.lock"
"""The catalog lock found beside a config (``[gateway] lock`` names another)."""
_VAR = re.compile(r"\$\{([^}]*)\}")
_REFERENCE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
"""What is between ``${`` and ``}``: a name, and perhaps ``:-`` and a default."""

Transport = Literal["stdio", "http", "sse"]
Instances = Literal["shared", "per-principal"]
DEFAULT_MAX_INSTANCES = 8
DEFAULT_IDLE_TIMEOUT = 600.0
AuthKind = Literal["oauth", "client_credentials"]
AUTH_KEYS = ("auth", "client_id", "client_secret", "client_metadata_url", "scopes", "redirect_port", "issuer")
"""The OAuth keys of a remote server's table."""
_WHOLE_VAR = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
DeclarationsMode = Mode
_POLICY = ClientPolicy()


class ConfigError(Exception):
    """A config problem: ``str()`` is the one line shown to the user (exit status 2).

    Escaped (``catalog.text.escape``): a key or value quoted in it is the file's own text, and
    a newline there would split the line (or forge a log line on reload), a bidi override
    reorder what the terminal shows."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(escape(f"{path}: {message}" if path else message))
        self.path = path


@dataclass(frozen=True)
class ServerConfig:
    id: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    arg_values: tuple[str, ...] = field(default=(), repr=False)
    """The values ``${VAR}`` expansion put into ``args`` (``["--token", "${TOKEN}"]``), masked
    where errors are recorded as ``env`` values are; literal args are in the config in clear."""
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    required: bool = False
    startup_timeout: float = 30.0
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    max_call_time: float = DEFAULT_MAX_CALL_TIME
    prefix: str = ""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """From ``[gateway]``."""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    deferred: bool = False
    instances: Instances = "shared"
    """A stdio server's processes over ``serve --http``: "shared" (one for every principal) or
    "per-principal" (one for each principal that calls it: gateway/engine/instances.py)."""
    max_instances: int = DEFAULT_MAX_INSTANCES
    """"per-principal": the most processes of it at once, besides the shared one."""
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    """"per-principal": seconds a principal's process may go without a request before it is stopped."""
    protocol: str = "auto"
    """"auto": the handshake toward a server that accepts it, 2026-07-28 (``server/discover``) toward
    one that refuses it; "modern": 2026-07-28 toward a server that offers it; "legacy": the
    handshake only (``Link.open`` in gateway/downstream/link.py)."""
    variables: tuple[str, ...] = ()
    """Every ``${VAR}`` this (enabled) server's table references: what the environment must carry."""
    defaulted: tuple[str, ...] = ()
    """Those of ``variables`` every reference of which has a default (``${VAR:-default}``): the
    environment may leave them out."""
    unset: tuple[tuple[str, str], ...] = ()
    """``(variable, key path)`` for each reference the environment did not set: the server cannot start."""
    unusable: tuple[tuple[str, str], ...] = ()
    """``(variable, key path)`` for each variable whose value cannot be used where it is referenced (a
    header value with a control character or leading/trailing whitespace): the server cannot start."""
    auth: AuthKind | None = None
    """Remote servers: "oauth" (``prefixgate login``, then stored tokens) or "client_credentials"."""
    client_id: str | None = None
    """A pre-registered OAuth client id (else a client ID metadata document or dynamic registration)."""
    client_secret: str | None = field(default=None, repr=False)
    """Its secret, expanded from the ``${VAR}`` the config must name (never a literal): never logged."""
    client_metadata_url: str | None = None
    """A Client ID Metadata Document URL, used as the client id where the authorization server supports it."""
    scopes: tuple[str, ...] = ()
    """Scopes asked for on top of what the server challenges for."""
    redirect_port: int | None = None
    """``prefixgate login``'s loopback redirect port (default: any free port)."""
    issuer: str | None = None
    """client_credentials: the authorization server the credentials belong to (they go nowhere else)."""

    @property
    def unset_reason(self) -> str | None:
        """Why the server cannot start because of its environment (names and keys, never a
        value), or None: a variable unset, or one whose value cannot be used where it is."""
        if self.unset:
            return _variables_reason(self.unset, "not set", "set it")
        if self.unusable:
            return _variables_reason(
                self.unusable,
                "holds a control character (CR, LF, NUL...) or leading/trailing whitespace, which a header "
                "value cannot carry (the value is not shown)",
                "fix it",
            )
        return None


def _variables_reason(found: tuple[tuple[str, str], ...], problem: str, fix: str) -> str:
    names = sorted({name for name, _ in found})
    where = ", ".join(f"${{{name}}} in {key}" for name, key in found)
    plural = "s" if len(names) > 1 else ""
    return (
        f"environment variable{plural} {', '.join(names)} {problem} ({where}); "
        f"{fix} in the environment that starts prefixgate and restart it"
    )


@dataclass(frozen=True)
class GatewayConfig:
    state_dir: Path
    discovery_deadline: float = 60.0
    separator: str = "__"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest JSON-RPC line read on stdio (from a server or the client); larger ones fail their request."""
    round_trip_timeout: float = 120.0
    """Seconds a downstream call waits for a modern client's input_required retry before it is cancelled."""
    max_round_trips: int = 16
    """Pending input_required round trips one principal may hold at once (more are refused)."""
    lock: Path | None = None
    """The catalog lock file (relative to the config's directory); None: ``prefixgate.lock``
    beside the config, when there is one."""
    lock_new: str = "hold"
    """"hold": a tool new since the lock is unpublished until approved; "allow": published (a new epoch)."""
    store: str | None = None
    """The shared state store, ``redis://`` or ``rediss://`` with ``${VAR}`` already expanded (it may
    hold a password: show it only through ``redact.redact_url``); None: the file store under ``state_dir``."""
    warm_start: bool = True
    """Answer ``initialize`` and ``tools/list`` at once from the last verified catalog of the same
    config (``catalog.warm``), while the discovery barrier runs behind it; False: every start waits."""
    reload: str = "watch"
    """How ``serve`` takes a changed config (``gateway.engine.reload``): "watch" the file (and
    SIGHUP over HTTP), "signal" on SIGHUP only (over HTTP), "off": a restart."""
    drain_timeout: float = 25.0
    """Seconds ``serve --http`` lets the requests in flight finish after a stop signal (new
    connections refused meanwhile) before it stops; a second signal stops it at once."""
    variables: tuple[str, ...] = ()
    """Every ``${VAR}`` of ``state_dir``, ``lock`` and ``store``: the environment prefixgate
    starts in must carry them (``doctor``'s registration snippets pass them on)."""
    defaulted: tuple[str, ...] = ()
    """Those of ``variables`` every reference of which has a default: they may be left out."""


@dataclass(frozen=True)
class ClientConfig:
    """``[client]``: the defaults are ``ClientPolicy``'s, written once in ``catalog.budget``."""

    profile: str = _POLICY.profile
    max_functions: int | None = None
    """Explicit override; ``None`` means the profile's limit."""
    context_window: int | None = _POLICY.context_window
    reserve_tokens: int = _POLICY.reserve_tokens
    keep_recent_tokens: int = _POLICY.keep_recent_tokens
    system_prompt_tokens: int = _POLICY.system_prompt_tokens
    declarations: DeclarationsMode = _POLICY.declarations
    defer: tuple[str, ...] = _POLICY.defer
    account: str | None = _POLICY.account
    model: str | None = _POLICY.model
    api: str | None = _POLICY.api
    endpoint: str | None = _POLICY.endpoint
    entry: str = DEFAULT_ENTRY
    """The name prefixgate is registered under in the client: counted in every published name
    by a profile whose client wraps names (``claude-code``: ``mcp__<entry>__<tool>``)."""

    @property
    def names(self) -> Profile:
        """The rule published names must meet, the client's wrapper already counted."""
        return PROFILES[self.profile].for_entry(self.entry)

    @property
    def function_limit(self) -> int | None:
        if self.max_functions is not None:
            return self.max_functions
        return PROFILES[self.profile].max_functions


@dataclass(frozen=True)
class PolicyConfig:
    """Enforced at call time only: the published list never changes for policy."""

    deny: tuple[str, ...] = ()
    """Globs on qualified names that may never run."""
    read_only: bool = False
    """Allow only tools whose ``readOnlyHint`` annotation is true."""


@dataclass(frozen=True)
class SpillConfig:
    """Bounding of tool results and retention of the full outputs (artifacts)."""

    enabled: bool = True
    max_visible_bytes: int = 65536
    max_artifact_bytes: int = 16 * 1024 * 1024
    max_age_days: float = 7.0
    max_total_bytes: int = 1024 * 1024 * 1024
    output_schemas: Literal["omit", "publish"] = "omit"
    """Whether tools/list carries the servers' ``outputSchema``s. A client that sees one rejects a
    successful result without ``structuredContent``, which bounding drops when it is large; so
    by default they are not published and a bounded success stays a success. "publish" keeps
    them, and such a bounded result is then marked ``isError``."""
    visible_given: bool = False
    """``[spill]`` sets ``max_visible_bytes``; else it is the client profile's (``for_client``)."""

    def for_client(self, client: ClientConfig) -> SpillConfig:
        """These settings for ``client``: its profile's bound on what the model sees, unless
        ``[spill]`` sets one (Claude Code moves a longer result out of the model's sight)."""
        if self.visible_given:
            return self
        return replace(self, max_visible_bytes=PROFILES[client.profile].max_visible_bytes)

    @property
    def publishes_output_schemas(self) -> bool:
        """Only bounding drops structuredContent: with spilling off, schemas are always published."""
        return not self.enabled or self.output_schemas == "publish"


@dataclass(frozen=True)
class ProfileConfig:
    """``[profiles.NAME]``: the same servers seen by one kind of client. A profile starts as the
    default profile (the top-level ``[client]`` and ``[policy]``) and changes what it sets."""

    name: str
    client: ClientConfig
    policy: PolicyConfig
    servers: tuple[str, ...] | None = None
    """The servers it sees (None: every one)."""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    """Globs on published names: the tools it sees (exclude wins)."""


@dataclass(frozen=True)
class TelemetryConfig:
    """What the gateway tells its operators beyond stderr (``gateway/telemetry/``)."""

    audit: bool = False
    """One JSON line per executed or refused tool call under ``<state_dir>/audit/``."""
    audit_arguments: bool = False
    """Audit lines carry the call's arguments too (bounded and redacted as logs are)."""
    audit_max_bytes: int = 16 * 1024 * 1024
    """The audit file's size before it rotates (one previous file is kept)."""
    metrics: str | None = None
    """A loopback ``HOST:PORT`` serving ``/metrics`` (``serve --http`` serves it at its own address too)."""


@dataclass(frozen=True)
class Config:
    path: Path | None
    gateway: GatewayConfig
    client: ClientConfig
    servers: tuple[ServerConfig, ...]
    """Every configured server, disabled ones included, sorted by id."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    spill: SpillConfig = field(default_factory=SpillConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    profiles: Mapping[str, ProfileConfig] = field(default_factory=dict)
    profile: str | None = None
    """The profile this config is the view of (``view``); None: the default profile."""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    """The profile's globs on published names (empty for the default profile)."""
    read: Stamp | None = field(default=None, compare=False, repr=False)
    """The file's ``stamp`` just before it was read: what a reload compares with, so an edit
    made while ``serve`` starts (a warm start answers before its imports are done) is a change."""

    @property
    def enabled_servers(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.servers if s.enabled)

    def view(self, name: str | None) -> Config:
        """The config as profile ``name`` sees it (None: the default profile): its client and
        policy, only its servers, its name filters. Raises ConfigError for an unknown name."""
        if name is None or name == self.profile:
            return self
        found = self.profiles.get(name)
        if found is None:
            known = ", ".join(sorted(self.profiles)) or "none: add a [profiles.NAME] table"
            where = f"${PROFILE_ENV}" if isinstance(name, EnvironmentProfile) else "profile"
            raise ConfigError(where, f"no profile {str(name)!r} in the config (known: {known})")
        servers = self.servers if found.servers is None else tuple(s for s in self.servers if s.id in found.servers)
        return replace(
            self,
            client=found.client,
            policy=found.policy,
            spill=self.spill.for_client(found.client),
            servers=servers,
            profile=name,
            include=found.include,
            exclude=found.exclude,
        )


# --- discovery -------------------------------------------------------------------------


def lock_target(config: Config) -> Path:
    """Where ``catalog lock`` writes: the configured path, else beside the config; a profile's
    lock beside the default one, its name in the file's (``prefixgate.NAME.lock``)."""
    if config.gateway.lock is not None:
        default = config.gateway.lock
    else:
        default = (config.path.parent if config.path is not None else Path.cwd()) / LOCK_FILE_NAME
    if config.profile is None:
        return default
    return default.with_name(f"{default.stem}.{config.profile}{default.suffix}")


def lock_path(config: Config) -> Path | None:
    """The lock a gateway serves under: the configured one (which must exist), or one found
    beside the config. A lock covers every profile: while the default profile's is in use, a
    profile is served under its own (which must exist: ``catalog lock`` writes them together)."""
    if config.gateway.lock is not None:
        return lock_target(config)
    if config.path is None:
        return None  # a config built in memory: never pick up a stray lock from the working directory
    default = lock_target(replace(config, profile=None))
    return lock_target(config) if default.exists() else None


def find_config(explicit: str | None, env: Mapping[str, str] | None = None) -> Path:
    """``--config``, then ``$PREFIXGATE_CONFIG``, ``./prefixgate.toml``, the XDG config file.

    A file that is there but cannot be read (a directory, a broken or looping link) is the one
    found, so reading it names it: passed over, a config from further down the list was used
    instead, or the error said to create the file that is there. ``--config ""`` (a script's
    unset variable) is refused, not read as "not given"."""
    env = os.environ if env is None else env
    if explicit is not None:
        if not explicit:
            raise ConfigError("--config", "an empty path: name the config file")
        return Path(explicit)
    if env.get("PREFIXGATE_CONFIG"):
        return Path(env["PREFIXGATE_CONFIG"])
    local = Path("prefixgate.toml")
    if os.path.lexists(local):
        return local
    home = home_directory()
    xdg = _xdg(env, "XDG_CONFIG_HOME") or (str(home / ".config") if home is not None else None)
    candidate = Path(xdg) / "prefixgate" / "config.toml" if xdg else None
    if candidate is not None and os.path.lexists(candidate):
        return candidate
    raise ConfigError(
        "",
        "no config file: pass --config PATH, set PREFIXGATE_CONFIG, or create ./prefixgate.toml "
        f"or {candidate or f'$XDG_CONFIG_HOME/prefixgate/config.toml ({_NO_HOME})'}",
    )


_Knob = TypeVar("_Knob", int, float)


def env_number(name: str, default: float) -> float:
    """The ``PREFIXGATE_*`` knob ``name`` (seconds), read where its module is imported. A value
    that is not a positive number (``30s``, ``-1``) is logged and the default used: ``float()``
    of it stopped ``serve`` on a ValueError traceback as the module was imported."""
    return _knob(name, default, float, "a positive number of seconds")


def env_count(name: str, default: int) -> int:
    """The ``PREFIXGATE_*`` knob ``name`` (a count), as ``env_number``: a whole number >= 1."""
    return _knob(name, default, int, "a whole number >= 1")


def _knob(name: str, default: _Knob, parse: Callable[[str], _Knob], expected: str) -> _Knob:
    """``parse`` of the variable ``name`` if it gives a value above 0 (not NaN), else ``default``
    (unset or empty: quietly; anything else: logged as not ``expected``)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not value > 0:  # (NaN too)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        logging.getLogger("prefixgate").warning("%s=%r is not %s: the default %s is used", name, raw, expected, shown)
        return default
    return value


_NO_HOME = "$HOME is not set and this user has no home directory"


def _xdg(env: Mapping[str, str], name: str) -> str | None:
    """An XDG base directory variable, None where unset, empty or relative: the XDG Base
    Directory spec has a relative one ignored, and taken as set, a gateway an agent starts in
    each project's directory kept its state (warm start, activation, history) per project."""
    value = env.get(name)
    return value if value and os.path.isabs(value) else None


def home_directory() -> Path | None:
    """The user's home, None where there is none to find: ``$HOME`` unset (``env -i``, a
    systemd unit) for a user the password database does not list (a container's arbitrary
    uid). ``Path.home()`` raises then, and every command stopped on that traceback."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def _expanded(key: str, path: Path) -> Path:
    """``path`` with its leading ``~`` expanded; a config error naming ``key`` where there is no home."""
    try:
        return path.expanduser()
    except (RuntimeError, KeyError):
        why = f"its '~' names no home directory ({_NO_HOME}, or no such user)"
        raise ConfigError(key, f"{str(path)!r}: {why}") from None


Stamp = tuple[int, int, int, int]


def stamp(path: Path) -> Stamp | None:
    """What tells a change of ``path`` (None: it cannot be read now)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


MAX_FILE_BYTES = 16 * 1024 * 1024
"""The most of a config or token file read: far more than any holds, and ``--config /dev/zero``
(or a log file named by mistake) is refused at once instead of read without end."""


def read_user_file(path: Path) -> bytes:
    """``path``'s bytes, read up to ``MAX_FILE_BYTES``; raises ``OSError`` (``EFBIG`` beyond)."""
    with open(path, "rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    return data


def text_of(data: bytes) -> str:
    """A text file the user wrote (the config, the token file): UTF-8, or UTF-16 after its byte
    order mark, which Windows PowerShell 5's ``>`` writes (``prefixgate import > prefixgate.toml``);
    a UTF-8 byte order mark (Windows Notepad's) is skipped. Raises ``UnicodeDecodeError``."""
    bom, encoding = next(((b, e) for b, e in _BOMS if data.startswith(b)), (b"", "utf-8"))
    try:
        return data[len(bom) :].decode(encoding)
    except UnicodeDecodeError as exc:  # (its offsets in the file, the mark counted)
        raise UnicodeDecodeError(exc.encoding, data, exc.start + len(bom), exc.end + len(bom), exc.reason) from None


_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def load_config(path: Path, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate ``path``; raise ConfigError with a one-line, key-naming message."""
    read = stamp(path)
    # (named by its bytes read as UTF-8: a name the locale cannot decode, any non-ASCII one
    # under LC_ALL=C PYTHONUTF8=0, was shown as Python holds it, 'cfg \udcc3\udcbc.toml')
    shown = path_text(path)
    try:
        text = text_of(read_user_file(path))
    except OSError as exc:
        raise ConfigError("", f"cannot read config {shown}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"config {shown} is not valid {exc.encoding.upper()} (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = ""
        if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
            # An agent's MCP config (.mcp.json, claude_desktop_config.json, mcp.json).
            hint = f"; it looks like an agent's JSON config: prefixgate import {shown} writes a prefixgate one from it"
        raise ConfigError("", f"config {shown} is not valid TOML: {exc}{hint}") from None
    return replace(parse_config(data, path=path, env=env), read=read)


# --- validation primitives -------------------------------------------------------------

Check = Callable[[str, Any], Any]


def _number(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, "expected a number")
    if not value > 0:  # (nan too: TOML has it)
        raise ConfigError(path, "expected a number greater than 0")
    return float(value)


def _count(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, "expected an integer")
    if value < 0:
        raise ConfigError(path, "expected an integer >= 0")
    return value


def _positive_count(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, "expected an integer")
    if value < 1:  # (before _count's ">= 0": one bound in every message)
        raise ConfigError(path, "expected an integer >= 1")
    return value


def _message_bytes(path: str, value: Any) -> int:
    number = _count(path, value)
    if number < MIN_MESSAGE_BYTES:
        raise ConfigError(path, f"expected an integer >= {MIN_MESSAGE_BYTES}")
    return number


def _bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, "expected true or false")
    return value


def _str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(path, "expected a string")
    return value


def _nonempty_str(path: str, value: Any) -> str:
    text = _str(path, value)
    if not text:
        raise ConfigError(path, "expected a non-empty string")
    return text


def _str_list(path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, "expected a list of strings")
    return tuple(value)


def _port(path: str, value: Any) -> int:
    number = _count(path, value)
    if not 1 <= number <= 65535:
        raise ConfigError(path, "expected a port number from 1 to 65535")
    return number


def _str_table(path: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(path, "expected a table of strings")
    return dict(value)


def _no_nul(path: str, text: str) -> str:
    """A process's command, arguments, environment and directory cannot hold NUL: refused here,
    naming the key, where starting the server would fail with ``embedded null byte``."""
    if "\0" in text:
        raise ConfigError(
            path, "contains a NUL character, which a process's command line, environment and directory cannot hold"
        )
    return text


def _process_str(path: str, value: Any) -> str:
    return _no_nul(path, _nonempty_str(path, value))


def _args(path: str, value: Any) -> tuple[str, ...]:
    items = _str_list(path, value)
    for i, item in enumerate(items):
        _no_nul(f"{path}[{i}]", item)
    return items


def _env(path: str, value: Any) -> dict[str, str]:
    """An environment: a name that is empty or holds ``=`` or NUL cannot be set (starting the
    server would fail with ``illegal environment variable name``, naming no key)."""
    table = _str_table(path, value)
    for name, text in table.items():
        where = f"{path}.{escape(name)}"
        if not name or "=" in name:
            raise ConfigError(where, "not a valid environment variable name (empty, or holds '=')")
        _no_nul(where, name)
        _no_nul(where, text)
    return table


def _entry(path: str, value: Any) -> str:
    text = _nonempty_str(path, value)
    if not SERVER_ID.fullmatch(text):
        raise ConfigError(path, "expected the client's name for prefixgate: letters, digits, '_' and '-'")
    return text


def _one_of(*choices: str) -> Check:
    def check(path: str, value: Any) -> str:
        if value not in choices:
            raise ConfigError(path, "expected one of " + ", ".join(repr(c) for c in choices))
        return str(value)

    return check


def _table(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(path, "expected a table")
    return value


def _fields(path: str, table: Mapping[str, Any], checks: Mapping[str, Check]) -> dict[str, Any]:
    """Validate every key of ``table`` with its check; unknown keys are errors."""
    out: dict[str, Any] = {}
    for key in sorted(table):
        where = f"{path}.{key}" if path else key
        if key not in checks:
            raise ConfigError(where, f"unknown key (known: {', '.join(sorted(checks))})")
        out[key] = checks[key](where, table[key])
    return out


class References:
    """What a server's expansions referenced, and which of those the environment lacked."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.plain: set[str] = set()
        """Those referenced somewhere without a default."""
        self.unset: list[tuple[str, str]] = []

    @property
    def defaulted(self) -> tuple[str, ...]:
        return tuple(sorted(self.names - self.plain))


def expand(path: str, text: str, env: Mapping[str, str], refs: References | None = None) -> str:
    """Replace ``${NAME}`` with the environment's value, and ``${NAME:-default}`` with it
    unless it is unset or empty (then with ``default``, as a shell and Claude Code do).

    ``$${`` escapes a literal ``${``. An invalid or unterminated reference is always an
    error, as is a default holding a ``$`` (no nested references); an unset name without a
    default is one too, unless ``refs`` collects it (then it expands to ""). Errors name
    the variable, never a value.
    """
    parts = text.split("$${")

    def sub(match: re.Match[str]) -> str:
        found = _REFERENCE.fullmatch(match.group(1))
        if found is None:
            raise ConfigError(path, f"invalid variable reference ${{{match.group(1)}}}")
        name, default = found.group(1), found.group(2)
        if default is not None and "$" in default:
            raise ConfigError(path, f"the default of ${{{name}:-...}} may not hold a '$' (no nested references)")
        if refs is not None:
            refs.names.add(name)
            if default is None:
                refs.plain.add(name)
        if default is not None:
            return env.get(name) or default
        if name not in env:
            if refs is None:
                raise ConfigError(path, f"environment variable {name} is not set")
            refs.unset.append((name, path))
            return ""
        return env[name]

    for part in parts:
        if "${" in _VAR.sub("", part):
            why = "unterminated variable reference: a '${' without its '}' (write $${ for a literal ${)"
            raise ConfigError(path, why)
    return "${".join(_VAR.sub(sub, part) for part in parts)


# --- tables ----------------------------------------------------------------------------

_GATEWAY_KEYS: dict[str, Check] = {
    "state_dir": _nonempty_str,
    "discovery_deadline": _number,
    "separator": _nonempty_str,
    "max_message_bytes": _message_bytes,
    "round_trip_timeout": _number,
    "max_round_trips": _positive_count,
    "lock": _nonempty_str,
    "lock_new": _one_of("allow", "hold"),
    "store": _nonempty_str,
    "warm_start": _bool,
    "reload": _one_of("watch", "signal", "off"),
    "drain_timeout": _number,
}

_CLIENT_KEYS: dict[str, Check] = {
    "profile": _one_of(*sorted(PROFILES)),
    "max_functions": _positive_count,
    "context_window": _positive_count,
    "reserve_tokens": _count,
    "keep_recent_tokens": _count,
    "system_prompt_tokens": _count,
    "declarations": _one_of(*get_args(Mode)),
    "defer": _str_list,
    "account": _str,
    "model": _str,
    "api": _str,
    "endpoint": _str,
    "entry": _entry,
}

_SERVER_KEYS: dict[str, Check] = {
    "command": _process_str,
    "args": _args,
    "env": _env,
    "cwd": _process_str,
    "url": _nonempty_str,
    "transport": _one_of("http", "sse"),
    "headers": _str_table,
    "enabled": _bool,
    "required": _bool,
    "startup_timeout": _number,
    "call_timeout": _number,
    "max_call_time": _number,
    "prefix": _str,
    "include": _str_list,
    "exclude": _str_list,
    "deferred": _bool,
    "protocol": _one_of("auto", "legacy", "modern"),
    "instances": _one_of(*get_args(Instances)),
    "max_instances": _positive_count,
    "idle_timeout": _number,
    "auth": _one_of("oauth", "client_credentials"),
    "client_id": _nonempty_str,
    "client_secret": _nonempty_str,
    "client_metadata_url": _nonempty_str,
    "scopes": _str_list,
    "redirect_port": _port,
    "issuer": _nonempty_str,
}

_POLICY_KEYS: dict[str, Check] = {
    "deny": _str_list,
    "read_only": _bool,
}

def _visible_bytes(path: str, value: Any) -> int:
    number = _positive_count(path, value)
    if number < 1024:
        raise ConfigError(path, "expected an integer >= 1024")
    return number


_SPILL_KEYS: dict[str, Check] = {
    "enabled": _bool,
    "max_visible_bytes": _visible_bytes,
    "max_artifact_bytes": _positive_count,
    "max_age_days": _number,
    "max_total_bytes": _positive_count,
    "output_schemas": _one_of("omit", "publish"),
}

def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port {number} is out of range")
    return host, number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_listen(path: str, value: Any) -> str:
    text = _str(path, value)
    try:
        host, _ = parse_listen(text)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    if not is_loopback(host):
        why = "metrics name servers and tools, and ask for no token"
        raise ConfigError(path, f"{host!r} is not a loopback address: {why}")
    return text


_TELEMETRY_KEYS: dict[str, Check] = {
    "audit": _bool,
    "audit_arguments": _bool,
    "audit_max_bytes": _positive_count,
    "metrics": _loopback_listen,
}

_PROFILE_KEYS: dict[str, Check] = {
    "servers": _str_list,
    "include": _str_list,
    "exclude": _str_list,
    "client": _table,
    "policy": _table,
}

_TOP_KEYS = ("client", "gateway", "policy", "profiles", "servers", "spill", "telemetry")


def _lock_path(gw: Mapping[str, Any], config: Path | None, env: Mapping[str, str]) -> Path | None:
    """``[gateway] lock``, relative to the config's directory (as a team commits both together)."""
    if "lock" not in gw:
        return None
    lock = _expanded("gateway.lock", local_path(expand("gateway.lock", gw["lock"], env)))
    return lock if lock.is_absolute() or config is None else config.parent / lock


_ENCODE_HINT = " (a password holding '/', '?', '#' or '@' is written percent-encoded: %2F, %3F, %23, %40)"


def _store_url(url: str) -> str:
    """``redis://[user:password@]host[:port][/db]`` (or ``rediss://``): checked here so a
    typo is a config error at start, not a connection error later. Messages never quote
    the URL (it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # (its message quotes the URL: what it took for the port may be a password)
        raise ConfigError("gateway.store", f"not a valid URL: its port is not a number{_ENCODE_HINT}") from None
    if parts.scheme not in ("redis", "rediss"):
        shown = f"{parts.scheme!r}" if parts.scheme else "none"
        raise ConfigError("gateway.store", f"scheme is {shown}: expected redis:// or rediss://")
    if not parts.hostname:
        raise ConfigError("gateway.store", "the URL names no host (expected redis://HOST:PORT/DB)")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise ConfigError("gateway.store", "the path must be a database number (redis://HOST:PORT/DB)")
    if port == 0 or parts.query or parts.fragment:
        raise ConfigError("gateway.store", f"expected redis://HOST:PORT/DB with no query or fragment{_ENCODE_HINT}")
    if not _installed("redis"):
        raise ConfigError("gateway.store", "the Redis store needs the redis package: pip install 'prefixgate[redis]'")
    return url


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported (found, not imported: that costs the start)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # blocked in sys.modules, or a broken parent
        return False


def path_text(path: Path) -> str:
    """A path as text to show or record: its bytes read as UTF-8, a byte that is not one written
    as an escape. Python holds a name its locale cannot decode (any non-ASCII name under
    ``LC_ALL=C PYTHONUTF8=0``, a Latin-1 name under a UTF-8 locale) with lone surrogates, which
    no UTF-8 text can carry (a history record with one failed, and ``serve`` with it): the same
    file is the same text under every locale."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def local_path(text: str) -> Path:
    """A path the config names, as this process can hand it to the system: the config is UTF-8,
    and under an ASCII locale (``LC_ALL=C PYTHONUTF8=0``) Python encodes names as ASCII, so a
    non-ASCII ``state_dir`` stopped every command on a traceback
    (``UnicodeEncodeError: 'ascii' codec can't encode character``) at its first file. Such a
    name is the file named by its UTF-8 bytes (as ``gateway.downstream.spawn.os_bytes`` passes
    a server's args), held as Python holds an undecodable name: with lone surrogates."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        text = os.fsdecode(text.encode("utf-8", "surrogateescape"))
    return Path(text)


def default_state_dir(env: Mapping[str, str]) -> Path:
    home = home_directory()
    base = _xdg(env, "XDG_STATE_HOME") or (str(home / ".local" / "state") if home is not None else None)
    if not base:
        raise ConfigError("gateway.state_dir", f"no default: $XDG_STATE_HOME is not set, {_NO_HOME}: set state_dir")
    return Path(base) / "prefixgate"


def parse_config(
    data: Mapping[str, Any], *, path: Path | None = None, env: Mapping[str, str] | None = None, servers: bool = True
) -> Config:
    """Validate ``data``; ``servers``: it must have an enabled server (not for the defaults
    the owner's commands use without a config, ``default_config``)."""
    env = os.environ if env is None else env
    for key in sorted(data):
        if key not in _TOP_KEYS:
            hint = ""
            if key in ("mcp_servers", "mcpServers"):
                source = "--from codex" if key == "mcp_servers" else "PATH"
                hint = f"; this is an agent's own config: prefixgate import {source} writes a prefixgate config from it"
            raise ConfigError(key, f"unknown table (known: {', '.join(_TOP_KEYS)}){hint}")

    gw = _fields("gateway", _table("gateway", data.get("gateway", {})), _GATEWAY_KEYS)
    state_dir = (
        _expanded("gateway.state_dir", local_path(expand("gateway.state_dir", gw["state_dir"], env)))
        if "state_dir" in gw
        else default_state_dir(env)
    )
    gateway = GatewayConfig(
        state_dir=state_dir,
        discovery_deadline=gw.get("discovery_deadline", 60.0),
        separator=gw.get("separator", "__"),
        max_message_bytes=gw.get("max_message_bytes", DEFAULT_MAX_MESSAGE_BYTES),
        round_trip_timeout=gw.get("round_trip_timeout", 120.0),
        max_round_trips=gw.get("max_round_trips", 16),
        lock=_lock_path(gw, path, env),
        lock_new=gw.get("lock_new", "hold"),
        store=_store_url(expand("gateway.store", gw["store"], env)) if "store" in gw else None,
        warm_start=gw.get("warm_start", True),
        reload=gw.get("reload", "watch"),
        drain_timeout=gw.get("drain_timeout", 25.0),
        variables=tuple(sorted({n for k in ("state_dir", "lock", "store") if k in gw for n in _variables_in(gw[k])})),
        defaulted=_defaulted([gw[k] for k in ("state_dir", "lock", "store") if k in gw]),
    )

    cl = _fields("client", _table("client", data.get("client", {})), _CLIENT_KEYS)
    client = ClientConfig(**cl)
    _client_names("client", client, gateway)

    servers_table = _table("servers", data.get("servers", {}))
    tables = tuple(
        _server(server_id, servers_table[server_id], gateway, client, env) for server_id in sorted(servers_table)
    )
    if servers and not any(s.enabled for s in tables):
        raise ConfigError("servers", "no enabled server: add at least one [servers.<id>] table")
    policy = PolicyConfig(**_fields("policy", _table("policy", data.get("policy", {})), _POLICY_KEYS))
    spill_table = _table("spill", data.get("spill", {}))
    spill = SpillConfig(**_fields("spill", spill_table, _SPILL_KEYS), visible_given="max_visible_bytes" in spill_table)
    spill = spill.for_client(client)
    telemetry = TelemetryConfig(
        **_fields("telemetry", _table("telemetry", data.get("telemetry", {})), _TELEMETRY_KEYS)
    )
    profiles_table = _table("profiles", data.get("profiles", {}))
    profiles = {
        name: _profile(name, profiles_table[name], client, policy, gateway, tables) for name in sorted(profiles_table)
    }
    _function_room("client", client, spill)
    for name, profile in profiles.items():
        _function_room(f"profiles.{name}.client", profile.client, spill)
    return Config(
        path=path,
        gateway=gateway,
        client=client,
        servers=tables,
        policy=policy,
        spill=spill,
        telemetry=telemetry,
        profiles=profiles,
    )


def _client_names(where: str, client: ClientConfig, gateway: GatewayConfig) -> None:
    """The client's naming profile leaves room for tool names and allows the separator; its
    context window, if given, leaves tokens for declarations."""
    profile = PROFILES[client.profile]
    if client.names.max_len < MIN_NAME_ROOM:
        raise ConfigError(
            f"{where}.entry",
            f"too long for profile {client.profile}: {profile.wrapped('', client.entry)!r} leaves "
            f"{client.names.max_len} of {profile.max_len} characters for a tool name (at least {MIN_NAME_ROOM})",
        )
    bad = _not_allowed(gateway.separator, client.profile)
    if bad is not None:
        raise ConfigError("gateway.separator", f"character {bad!r} is not allowed in {client.profile} tool names")
    if client.context_window is not None:
        left = client.context_window - client.reserve_tokens - client.keep_recent_tokens - client.system_prompt_tokens
        if left <= 0:  # (every tool deferred, and even the meta tools over budget, without a word)
            raise ConfigError(
                f"{where}.context_window",
                f"{client.context_window} leaves {left} tokens for declarations once reserve_tokens "
                f"({client.reserve_tokens}), keep_recent_tokens ({client.keep_recent_tokens}) and "
                f"system_prompt_tokens ({client.system_prompt_tokens}) are taken: raise it or lower those",
            )


def _function_room(where: str, client: ClientConfig, spill: SpillConfig) -> None:
    """``max_functions`` leaves room for the gateway's own tools: on-demand declarations (what
    ``auto`` falls back to) are ``tool_search`` and ``tool_call``, and ``artifact_read`` while
    spilling, before any catalog tool. Below that no plan fits once the fallback is needed, and
    whether it is depends on the servers' lists: found at load, not once every server has started.
    (``declarations = "fixed"`` never falls back: its limit is the catalog's, checked at each build.)"""
    limit = client.max_functions
    if limit is None or client.declarations == "fixed":
        return
    meta = ["tool_search", "tool_call", *(["artifact_read"] if spill.enabled else [])]
    if limit < len(meta):
        raise ConfigError(
            f"{where}.max_functions",
            f"{limit} is below the gateway's own tools ({', '.join(meta)}): at least {len(meta)}",
        )


def _not_allowed(text: str, naming: str) -> str | None:
    """The first character of ``text`` that naming profile ``naming`` does not allow in tool names."""
    allowed = PROFILES[naming].allowed
    return next((c for c in text if not allowed.fullmatch(c)), None)


def _profile(
    name: str,
    raw: Any,
    client: ClientConfig,
    policy: PolicyConfig,
    gateway: GatewayConfig,
    servers: tuple[ServerConfig, ...],
) -> ProfileConfig:
    """``[profiles.NAME]``: the default profile's client and policy with what it sets changed."""
    where = f"profiles.{name}"
    if not PROFILE_NAME.fullmatch(name):
        raise ConfigError(
            where,
            "invalid profile name: use lowercase letters, digits, '_' and '-' (at most 32), starting with a "
            "letter or digit",
        )
    if name == "default":
        raise ConfigError(where, "'default' is the top-level [client] and [policy]: name this profile otherwise")
    p = _fields(where, _table(where, raw), _PROFILE_KEYS)
    mine = replace(client, **_fields(f"{where}.client", p.get("client", {}), _CLIENT_KEYS))
    _client_names(f"{where}.client", mine, gateway)
    known = {s.id: s for s in servers}
    seen = p.get("servers")
    for server_id in seen or ():
        if server_id not in known:
            raise ConfigError(f"{where}.servers", f"unknown server {server_id!r} (known: {', '.join(sorted(known))})")
    if seen is not None and not any(known[s].enabled for s in seen):
        raise ConfigError(f"{where}.servers", "names no enabled server")
    for server in servers:
        bad = _not_allowed(server.prefix, mine.profile)
        if bad is not None and (seen is None or server.id in seen):
            raise ConfigError(
                f"servers.{server.id}.prefix",
                f"character {bad!r} is not allowed in {mine.profile} tool names (profile {name})",
            )
    return ProfileConfig(
        name=name,
        client=mine,
        policy=replace(policy, **_fields(f"{where}.policy", p.get("policy", {}), _POLICY_KEYS)),
        servers=tuple(sorted(set(seen))) if seen is not None else None,
        include=p.get("include", ()),
        exclude=p.get("exclude", ()),
    )


def default_config(env: Mapping[str, str] | None = None) -> Config:
    """Every default and no server: the state directory and retention a config without a
    ``[gateway]`` or ``[spill]`` table would have."""
    return parse_config({}, env=env, servers=False)


def _server(
    server_id: str, raw: Any, gateway: GatewayConfig, client: ClientConfig, env: Mapping[str, str]
) -> ServerConfig:
    where = f"servers.{server_id}"
    if not SERVER_ID.fullmatch(server_id):
        raise ConfigError(where, "invalid server id: use letters, digits, '_' and '-', starting with a letter or digit")
    s = _fields(where, _table(where, raw), _SERVER_KEYS)
    if "command" in s and "url" in s:
        raise ConfigError(where, "has both command (stdio) and url (http/sse): choose one")
    if "command" not in s and "url" not in s:
        raise ConfigError(f"{where}.command", "missing: set command (stdio) or url (http/sse)")
    stdio_only = ("args", "env", "cwd", "instances", "max_instances", "idle_timeout")
    remote_only = ("transport", "headers", *AUTH_KEYS)
    wrong = [k for k in (remote_only if "command" in s else stdio_only) if k in s]
    if wrong:
        kind = "a stdio server (command)" if "command" in s else "a remote server (url)"
        raise ConfigError(f"{where}.{wrong[0]}", f"not valid for {kind}")
    per_principal = s.get("instances") == "per-principal"
    if not per_principal and (loose := next((k for k in ("max_instances", "idle_timeout") if k in s), None)):
        raise ConfigError(f"{where}.{loose}", 'only with instances = "per-principal"')

    call_timeout = s.get("call_timeout", DEFAULT_CALL_TIMEOUT)
    max_call_time = s.get("max_call_time", DEFAULT_MAX_CALL_TIME)
    if max_call_time < call_timeout:
        if "max_call_time" in s:
            raise ConfigError(f"{where}.max_call_time", f"is less than call_timeout ({call_timeout:g} s)")
        raise ConfigError(
            f"{where}.call_timeout", f"is more than max_call_time ({max_call_time:g} s by default): raise that too"
        )
    prefix = s.get("prefix", server_id)
    bad = _not_allowed(prefix, client.profile)
    if bad is not None:
        raise ConfigError(f"{where}.prefix", f"character {bad!r} is not allowed in {client.profile} tool names")

    common = dict(
        id=server_id,
        enabled=s.get("enabled", True),
        required=s.get("required", False),
        startup_timeout=s.get("startup_timeout", 30.0),
        call_timeout=call_timeout,
        max_call_time=max_call_time,
        prefix=prefix,
        max_message_bytes=gateway.max_message_bytes,
        include=s.get("include", ()),
        exclude=s.get("exclude", ()),
        deferred=s.get("deferred", False),
        protocol=s.get("protocol", "auto"),
        instances=s.get("instances", "shared"),
        max_instances=s.get("max_instances", DEFAULT_MAX_INSTANCES),
        idle_timeout=s.get("idle_timeout", DEFAULT_IDLE_TIMEOUT),
    )
    if not common["enabled"]:
        # A disabled server is validated for shape but never expanded: its variables may be unset.
        return ServerConfig(transport="stdio" if "command" in s else s.get("transport", "http"), **common)
    refs = References()
    if "command" in s:
        command = expand(f"{where}.command", s["command"], env, refs)
        args = tuple(expand(f"{where}.args[{i}]", a, env, refs) for i, a in enumerate(s.get("args", ())))
        arg_values = {env[name] for a in s.get("args", ()) for name in _variables_in(a) if name in env}
        child_env = {k: expand(f"{where}.env.{k}", v, env, refs) for k, v in sorted(s.get("env", {}).items())}
        cwd = expand(f"{where}.cwd", s["cwd"], env, refs) if "cwd" in s else None
        return ServerConfig(
            transport="stdio",
            command=command,
            args=args,
            env=child_env,
            arg_values=tuple(sorted(arg_values)),
            cwd=str(_expanded(f"{where}.cwd", Path(cwd))) if cwd is not None else None,
            variables=tuple(sorted(refs.names)),
            defaulted=refs.defaulted,
            unset=tuple(refs.unset),
            **common,
        )
    url = expand(f"{where}.url", s["url"], env, refs)
    raw_headers = s.get("headers", {})
    headers = {k: expand(f"{where}.headers.{k}", v, env, refs) for k, v in sorted(raw_headers.items())}
    auth = _auth_fields(where, s, env, refs)
    unusable: list[tuple[str, str]] = []
    # With a variable unset the values are incomplete: checked once it is set (the server fails meanwhile).
    if not refs.unset:
        if not re.match(r"^https?://", url):
            raise ConfigError(f"{where}.url", "expected an http:// or https:// URL")
        # The config's own text only: a variable's value (Gemini CLI passes a missing one on
        # empty) is the environment's, and fails this server alone when it connects.
        if not _references_in(s["url"]) and (problem := _url_problem(url)) is not None:
            raise ConfigError(f"{where}.url", problem)
        for name, value in headers.items():
            try:
                header_problem(f"{where}.headers", name, value)
            except ConfigError:
                # The config's own text is the config's problem (exit 2); a variable's value is
                # the environment's, and fails this server alone, as an unset one does.
                # (a default used in place of an unset variable is the config's own text)
                culprits = [variable for variable in _variables_in(raw_headers[name]) if variable in env]
                header_problem(f"{where}.headers", name, expand("", raw_headers[name], dict.fromkeys(culprits, "x")))
                unusable += [(variable, f"{where}.headers.{name}") for variable in culprits]
    return ServerConfig(
        transport=s.get("transport", "http"),
        url=url,
        headers=headers,
        **auth,
        variables=tuple(sorted(refs.names)),
        defaulted=refs.defaulted,
        unset=tuple(refs.unset),
        unusable=tuple(unusable),
        **common,
    )


def _url_problem(url: str) -> str | None:
    """What makes an http(s) URL one no connection can be made to (no host, a port out of range,
    a broken IPv6 literal, a space in the host), without showing the URL (it may hold a password):
    the config's error, where connecting would fail with an error naming no key."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL: {str(exc).split(' as ')[0]}"
    host = parts.hostname
    if not host:
        return "not a valid URL: it names no host"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in host):
        return "not a valid URL: its host holds a space or a control character"
    if port == 0:
        return "not a valid URL: port 0"
    return None


def _references_in(text: str) -> list[str]:
    """What is inside each ``${...}`` of ``text`` (``$${`` is a literal ``${``), in order."""
    return [inner for part in text.split("$${") for inner in _VAR.findall(part)]


def _variables_in(text: str) -> list[str]:
    """The variables ``text`` references, in order."""
    return list(dict.fromkeys(inner.split(":-", 1)[0] for inner in _references_in(text)))


def _defaulted(texts: list[str]) -> tuple[str, ...]:
    """The variables every reference of which in ``texts`` has a default."""
    inners = [inner for text in texts for inner in _references_in(text)]
    plain = {inner for inner in inners if ":-" not in inner}
    return tuple(sorted({inner.split(":-", 1)[0] for inner in inners if ":-" in inner} - plain))


def _auth_fields(where: str, s: Mapping[str, Any], env: Mapping[str, str], refs: References) -> dict[str, Any]:
    """A remote server's OAuth keys, checked together (each alone is checked by its type)."""
    kind = s.get("auth")
    if kind is None:
        extra = next((k for k in AUTH_KEYS if k in s), None)
        if extra is not None:
            raise ConfigError(f"{where}.{extra}", 'only with auth = "oauth" or "client_credentials"')
        return {}
    if "client_secret" in s and not _WHOLE_VAR.fullmatch(s["client_secret"]):
        raise ConfigError(
            f"{where}.client_secret",
            "must be a ${VAR} reference to an environment variable, never the secret itself (the value is not shown)",
        )
    if "client_secret" in s and "client_id" not in s:
        raise ConfigError(f"{where}.client_id", "missing: client_secret needs the client_id it belongs to")
    if kind == "client_credentials":
        for key in ("client_id", "client_secret"):
            if key not in s:
                raise ConfigError(
                    f"{where}.{key}", 'missing: auth = "client_credentials" needs client_id and client_secret'
                )
        for key in ("client_metadata_url", "redirect_port"):
            if key in s:
                raise ConfigError(f"{where}.{key}", 'not valid with auth = "client_credentials" (no browser flow)')
    if "issuer" in s and kind != "client_credentials":
        raise ConfigError(f"{where}.issuer", 'only with auth = "client_credentials" (the browser flow discovers it)')
    for key in ("client_metadata_url", "issuer"):
        if key in s and not re.match(r"^https?://", s[key]):
            raise ConfigError(f"{where}.{key}", "expected an http:// or https:// URL")
    if any(name.lower() == "authorization" for name in s.get("headers", {})):
        raise ConfigError(f"{where}.headers.Authorization", "not with auth: the OAuth flow sends the token")
    scopes = s.get("scopes", ())
    for i, scope in enumerate(scopes):
        if not scope or any(c.isspace() or c in '"\\' for c in scope):
            raise ConfigError(f"{where}.scopes[{i}]", "expected a scope token (no spaces, quotes or backslashes)")
    secret = expand(f"{where}.client_secret", s["client_secret"], env, refs) if "client_secret" in s else None
    return dict(
        auth=kind,
        client_id=s.get("client_id"),
        client_secret=secret,
        client_metadata_url=s.get("client_metadata_url"),
        scopes=tuple(scopes),
        redirect_port=s.get("redirect_port"),
        issuer=s.get("issuer"),
    )


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name: an RFC 9110 token."""
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|^[ \t]|[ \t]$")
"""What an HTTP field value must not hold: control characters (CR, LF, NUL...) other than
a tab, and leading or trailing whitespace. The HTTP library would reject it later, in an
error quoting the value, secret included."""


def header_problem(where: str, name: str, value: str) -> None:
    """Raise a ConfigError naming the header, never its value (it is usually a secret)."""
    if not _HEADER_NAME.fullmatch(name):
        raise ConfigError(f"{where}.{escape(name)}", "not a valid HTTP header name")
    if _HEADER_VALUE_BAD.search(value):
        raise ConfigError(
            f"{where}.{name}",
            "invalid header value: control characters (CR, LF, NUL...) or leading/trailing whitespace "
            "(the value is not shown)",
        )
