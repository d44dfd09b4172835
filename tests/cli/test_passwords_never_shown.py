"""Passwords in connection URLs are never printed, whatever form they take.

A URL can carry its password as user info (``user:secret@host``), as a query parameter
(``?password=secret``) or, for Postgres, as libpq key/value conninfo (``password=secret``).
Errors and the command line show every such URL with ``***`` in its place, while the
original URL is the one used to connect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from psycopg.conninfo import conninfo_to_dict
from redis.credentials import CredentialProvider
from typer.testing import Result

from langgraph_durable import DurableSaver
from langgraph_durable.config import SaverConfig, mask_url
from langgraph_durable.errors import ConfigurationError
from tests.support.cli_runner import cli_for
from tests.support.faults import PrivateRedis, private_redis
from tests.support.servers import POSTGRES_URL, postgres_url

SECRET = "S3cret-Zq9"
REDIS_PASSWORD = "R3dis-Zq9"

PG = conninfo_to_dict(POSTGRES_URL)
PG_HOST, PG_PORT = PG.get("host", "127.0.0.1"), PG.get("port", "5432")
PG_USER, PG_DB = PG.get("user", "postgres"), PG.get("dbname", "postgres")

# Postgres URLs of the test server with a password in each form. The test server trusts
# local connections, so each connects whatever the password; what matters is that the
# original, unmasked URL reaches libpq.
POSTGRES_FORMS = {
    "uri user info": postgres_url(password=SECRET),
    "uri ?password=": postgres_url(query={"password": SECRET}),
    "key/value": f"host={PG_HOST} port={PG_PORT} dbname={PG_DB} user={PG_USER} "
                 f"password={SECRET}",
}


@pytest.mark.parametrize(("url", "shown"), [
    (f"redis://user:{SECRET}@h:6379/0", "redis://user:***@h:6379/0"),
    (f"redis://:{SECRET}@h:6379/0", "redis://:***@h:6379/0"),
    (f"rediss://default:{SECRET}@h:6380/1?ssl_cert_reqs=none",
     "rediss://default:***@h:6380/1?ssl_cert_reqs=none"),
    (f"redis://h:6379/0?db=1&password={SECRET}", "redis://h:6379/0?db=1&password=***"),
    (f"unix://:{SECRET}@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
    (f"postgresql://u:{SECRET}@h/db", "postgresql://u:***@h/db"),
    (f"postgres://u:{SECRET}@h1:5432,h2:5433/db", "postgres://u:***@h1:5432,h2:5433/db"),
    (f"postgresql://u@h/db?sslmode=require&password={SECRET}",
     "postgresql://u@h/db?sslmode=require&password=***"),
    (f"postgresql://u@h/db?sslpassword={SECRET}", "postgresql://u@h/db?sslpassword=***"),
    (f"host=h dbname=db password={SECRET}", None),
    (f"host=h password='{SECRET} with spaces' dbname=db", None),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    (f"redis+sentinel://:{SECRET}@h1:26379,h2:26379/mymaster/0",
     "redis+sentinel://:***@h1:26379,h2:26379/mymaster/0"),
    (f"rediss+sentinel://app:{SECRET}@h1,h2/mymaster?sentinel_password={SECRET}",
     "rediss+sentinel://app:***@h1,h2/mymaster?sentinel_password=***"),
    ("postgresql://postgres@/db?host=/var/run/postgresql",
     "postgresql://postgres@/db?host=/var/run/postgresql"),
])
def test_mask_url_hides_the_password_of_every_form(url: str, shown: str | None) -> None:
    """`mask_url` replaces the password with ``***`` and keeps the rest readable; URLs
    without a password come back unchanged."""
    masked = mask_url(url)
    assert SECRET not in masked
    if shown is not None:
        assert masked == shown
    else:  # key/value conninfo: the same settings, the password masked
        assert conninfo_to_dict(masked) == {**conninfo_to_dict(url), "password": "***"}


@pytest.mark.parametrize("field", ["redis_url", "postgres_url"])
def test_configuration_errors_mask_the_url(field: str) -> None:
    """A URL rejected by the configuration is named in the error with its password
    masked; the config's repr masks both URLs too."""
    bad = {"redis_url": f"http://user:{SECRET}@127.0.0.1:6379",
           "postgres_url": f"mysql://user:{SECRET}@127.0.0.1/db"}[field]
    with pytest.raises(ConfigurationError) as caught:
        SaverConfig(**{field: bad})  # type: ignore[arg-type]
    assert SECRET not in str(caught.value)
    assert "user:***@127.0.0.1" in str(caught.value)
    config = SaverConfig(redis_url=f"rediss://:{SECRET}@h:6380/0",
                         postgres_url=POSTGRES_FORMS["key/value"])
    assert SECRET not in repr(config)


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """A private redis-server that requires a password."""
    with private_redis(tmp_path_factory.mktemp("redis"), password=REDIS_PASSWORD) as server:
        yield server


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """Run a command on this module's schema and prefix."""
    return cli_for(namespace)


@pytest.mark.parametrize("form", sorted(POSTGRES_FORMS))
def test_doctor_masks_postgres_and_redis_passwords_and_still_connects(
        form: str, cli: Callable[..., Result], saver: DurableSaver,
        locked_redis: PrivateRedis) -> None:
    """doctor connects with the URLs as given (a password-protected Redis answers, the
    Postgres check passes) and prints each with ``***`` for the password."""
    redis_url = f"redis://default:{REDIS_PASSWORD}@127.0.0.1:{locked_redis.port}/0"
    result = cli("doctor", "--redis-url", redis_url, "--postgres-url", POSTGRES_FORMS[form])
    assert result.exit_code in (0, 4), result.output
    assert SECRET not in result.output and REDIS_PASSWORD not in result.output
    assert f"redis://default:***@127.0.0.1:{locked_redis.port}/0" in result.stdout
    postgres = next(line for line in result.stdout.splitlines() if "PostgreSQL" in line)
    assert "✔" in postgres and "***" in postgres


def test_doctor_masks_an_unreachable_sentinel_url(cli: Callable[..., Result]) -> None:
    """The same for a Sentinel URL with passwords for the primary and the sentinels."""
    url = f"redis+sentinel://app:{SECRET}@127.0.0.1:1/mymaster/0?sentinel_password={SECRET}"
    result = cli("doctor", "--redis-url", url)
    assert result.exit_code == 3
    assert SECRET not in result.output
    assert ("cannot connect to Redis at redis+sentinel://app:***@127.0.0.1:1/mymaster/0"
            "?sentinel_password=***") in result.stderr


@pytest.mark.parametrize("url", [
    f"redis+sentinel://:{SECRET}@127.0.0.1:26379/",
    f"redis+sentinel://:{SECRET}@/mymaster/0",
    f"redis+sentinel://:{SECRET}@127.0.0.1:26379/mymaster/zero",
])
def test_a_malformed_sentinel_url_is_refused_with_its_form_and_no_password(url: str) -> None:
    """A Sentinel URL without sentinels, service name or a numeric database is refused
    when the saver is made, the error showing the expected form and the URL masked."""
    with pytest.raises(ConfigurationError) as caught:
        DurableSaver(url)
    assert SECRET not in str(caught.value)
    assert "redis+sentinel://host:26379" in str(caught.value) and ":***@" in str(caught.value)


class TokenProvider(CredentialProvider):
    """A credential provider holding its current token."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_credentials(self) -> tuple[str, str]:
        return "app", self.token

    def __repr__(self) -> str:
        return f"TokenProvider(token={self.token!r})"


def test_credential_providers_are_never_shown() -> None:
    """A config's repr leaves out the Redis credential provider and the Postgres
    credentials callable, whatever their own repr shows; a URL with a password as well
    as a provider is refused with the password masked."""
    provider = TokenProvider(SECRET)
    config = SaverConfig(redis_credential_provider=provider,
                         postgres_credentials=lambda: {"password": SECRET})
    assert SECRET not in repr(config)
    with pytest.raises(ConfigurationError) as caught:
        DurableSaver(f"redis://:{SECRET}@127.0.0.1:6379/0", redis_credential_provider=provider)
    assert SECRET not in str(caught.value) and "redis://:***@127.0.0.1:6379/0" in str(caught.value)


def test_doctor_masks_an_unreachable_rediss_url(cli: Callable[..., Result]) -> None:
    """The one-line error for a TLS Redis URL nobody answers names it, password masked."""
    result = cli("doctor", "--redis-url", f"rediss://default:{SECRET}@127.0.0.1:1/0")
    assert result.exit_code == 3
    assert SECRET not in result.output
    assert "cannot connect to Redis at rediss://default:***@127.0.0.1:1/0" in result.stderr


@pytest.mark.parametrize("form", sorted(POSTGRES_FORMS))
def test_threads_masks_the_postgres_password(form: str, cli: Callable[..., Result],
                                             saver: DurableSaver) -> None:
    """threads names the database it lists with the password masked, and so does the
    error for a schema that is not set up."""
    listed = cli("threads", "--postgres-url", POSTGRES_FORMS[form])
    assert listed.exit_code == 0, listed.output
    assert SECRET not in listed.output
    assert "threads in" in listed.stdout and "***" in listed.stdout
    missing = cli("threads", "--postgres-url", POSTGRES_FORMS[form],
                  "--schema", "lgdt_never_set_up")
    assert missing.exit_code == 2
    assert SECRET not in missing.output
    assert "is not set up" in missing.stderr and "***" in missing.stderr


def test_threads_masks_an_unreachable_redis_url(cli: Callable[..., Result],
                                                saver: DurableSaver) -> None:
    """With Redis down, threads still lists from Postgres and its warning names the Redis
    URL with the password masked."""
    result = cli("threads", "--redis-url", f"redis://:{SECRET}@127.0.0.1:1/0")
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert "redis://:***@127.0.0.1:1/0" in result.stderr


def test_a_locked_redis_refuses_the_masked_url(locked_redis: PrivateRedis) -> None:
    """The masked form is for people only: the server refuses it, so a pass above means
    the original URL was used."""
    masked = mask_url(f"redis://default:{REDIS_PASSWORD}@127.0.0.1:{locked_redis.port}/0")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(masked).ping()
