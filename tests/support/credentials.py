"""A Redis credential provider that rotates its password, as a managed service's does."""

from __future__ import annotations

import threading

from redis.credentials import CredentialProvider


class RotatingCredentials(CredentialProvider):
    """Hands out the current user and password, as a token provider would; counts calls."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self.calls = 0
        self._lock = threading.Lock()

    def get_credentials(self) -> tuple[str, str]:
        with self._lock:
            self.calls += 1
            return self.user, self.password
