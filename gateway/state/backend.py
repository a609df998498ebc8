"""Which state store a config selects: Redis when ``[gateway] store`` names one, else files."""

from __future__ import annotations

from gateway.config import Config
from gateway.state.filestore import FileStore
from gateway.state.store import StateStore


def state_store(config: Config) -> StateStore:
    """The configured store, not yet opened (constructing one does no I/O)."""
    if config.gateway.store is None:
        return FileStore(config.gateway.state_dir, max_age_seconds=config.spill.max_age_days * 86400)
    from gateway.state.redisstore import RedisStore

    return RedisStore(config.gateway.store, max_age_seconds=config.spill.max_age_days * 86400)
