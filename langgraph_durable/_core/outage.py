"""What a saver does when Redis fails a request: its breaker opens, and the failure that
starts an outage is said once, where an operator and a person running a script see it."""

from __future__ import annotations

import logging
import warnings

from langgraph_durable._core.context import Context
from langgraph_durable.config import mask_url
from langgraph_durable.errors import DegradedWarning, TierUnavailableError

logger = logging.getLogger("langgraph_durable")


def hot_failed(ctx: Context, exc: TierUnavailableError) -> None:
    """Open the breaker after a Redis failure. The failure that starts an outage is said
    once, at WARNING: where (the URL, password hidden), why, and what the saver does until
    Redis answers (`recover_hot` says when it does). The saver's first outage is also a
    `DegradedWarning`, which a program that configured no logging still shows."""
    if not ctx.breaker.failure(exc):
        return
    if ctx.config.write_mode == "behind":
        meanwhile = ("reads and writes of write-behind threads raise TierUnavailableError "
                     "until it answers")
    else:
        meanwhile = "reads and writes go to Postgres alone until it answers; nothing is lost"
    said = (f"Redis (hot tier) at {mask_url(ctx.config.redis_url)} cannot be reached "
            f"({exc.__cause__ or exc}): {meanwhile}; retried every "
            f"{ctx.breaker.cooldown:g} s")
    logger.warning("%s", said)
    if ctx.breaker.trips == 1:
        warnings.warn(f"{said} (set redis_required=True to refuse to start without it)",
                      DegradedWarning, stacklevel=2)
