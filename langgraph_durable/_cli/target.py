"""Which servers, schema and key prefix a CLI command works on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from langgraph_durable._tiers.probes import recorded_shards, unanswered
from langgraph_durable.config import Retention, SaverConfig
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.saver import DurableSaver
from langgraph_durable.store import DurableStore

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, option: str) -> float:
    """Seconds in ``90``, ``90s``, ``15m``, ``12h``, ``30d`` or ``2w``.

    Raises:
        ConfigurationError: ``text`` is none of those.
    """
    match = _DURATION.match(text)
    if not match:
        raise ConfigurationError(
            f"{option} takes a duration such as 3600, 90m, 12h, 30d or 2w; got {text!r}"
        )
    return float(match[1]) * _UNITS[match[2]]


@dataclass(frozen=True, slots=True)
class Target:
    """Which servers, schema and key prefix a command works on."""

    redis_url: str | None
    postgres_url: str | None
    schema: str
    prefix: str
    write_mode: str = "through"
    retention: Retention | None = None

    def config(self) -> SaverConfig:
        """The saver configuration, with the URLs resolved (flag, then env, then default).

        Raises:
            ConfigurationError: a URL, the schema, the prefix or the write mode is invalid.
        """
        return SaverConfig.from_env(
            redis_url=self.redis_url, postgres_url=self.postgres_url, schema=self.schema,
            key_prefix=self.prefix, write_mode=self.write_mode, pool_timeout=10.0,
        )

    def saver(self) -> DurableSaver:
        """A saver on the target (not set up), with the journal shards the prefix
        recorded unless set (see `probes.recorded_shards`)."""
        config = self.config()
        saver = DurableSaver(
            config.redis_url, config.postgres_url, schema=config.schema,
            key_prefix=config.key_prefix, write_mode=config.write_mode,
            pool_timeout=config.pool_timeout, tier_timeout=config.tier_timeout,
            retention=self.retention, journal_shards=recorded_shards(config),
        )
        if (down := unanswered(config.redis_url)) is not None:
            # this command found Redis silent already: the saver starts with it bypassed
            # (its breaker open), rather than wait for it once more
            saver.engine.context.breaker.failure(down)
        return saver

    def store(self) -> DurableStore:
        """A store on the target (not set up); it keeps off a Redis that did not answer
        earlier in this command."""
        config = self.config()
        store = DurableStore(
            config.redis_url, config.postgres_url, schema=config.schema,
            key_prefix=config.key_prefix, pool_timeout=config.pool_timeout,
            tier_timeout=config.tier_timeout)
        if (down := unanswered(config.redis_url)) is not None:
            store.engine.context.breaker.failure(down)
        return store
