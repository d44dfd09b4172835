"""Which servers, schema and key prefix a CLI command works on."""

from __future__ import annotations

from dataclasses import dataclass

from langgraph_durable.config import SaverConfig
from langgraph_durable.saver import DurableSaver


@dataclass(frozen=True, slots=True)
class Target:
    """Which servers, schema and key prefix a command works on."""

    redis_url: str | None
    postgres_url: str | None
    schema: str
    prefix: str
    write_mode: str = "through"

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
        """A saver on the target (not set up)."""
        config = self.config()
        return DurableSaver(
            config.redis_url, config.postgres_url, schema=config.schema,
            key_prefix=config.key_prefix, write_mode=config.write_mode,
            pool_timeout=config.pool_timeout,
        )
