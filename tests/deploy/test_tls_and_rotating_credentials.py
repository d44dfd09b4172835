"""Managed services: Redis over TLS (``rediss://``), Redis credentials from a provider that
rotates them (ElastiCache IAM, Entra ID tokens), Postgres credentials asked for at each new
connection, and libpq's ``sslmode`` passed through."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from langgraph_durable import ConfigurationError, DurableSaver
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import DurableError
from tests.support.checkpoints import put_value
from tests.support.cli_runner import cli_for
from tests.support.credentials import RotatingCredentials
from tests.support.deployment_servers import TlsRedis, pings, process, redis_args, tls_redis
from tests.support.faults import Proxy, free_port
from tests.support.servers import (
    POSTGRES_DATABASE,
    POSTGRES_URL,
    REDIS_URL,
    postgres_address,
    postgres_url,
)

pytestmark = pytest.mark.timeout(120)


def _value(saver: DurableSaver, thread_id: str) -> object:
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert found is not None
    return found.checkpoint["channel_values"]["value"]


async def _aread(saver: DurableSaver, thread_id: str) -> object:
    """The value an async caller reads (through the event loop's own clients)."""
    found = await saver.aget_tuple({"configurable": {"thread_id": thread_id,
                                                     "checkpoint_ns": ""}})
    assert found is not None
    return found.checkpoint["channel_values"]["value"]


async def _ahistory(saver: DurableSaver, thread_id: str) -> int:
    """How many checkpoints an async caller lists (a read Postgres answers, so through the
    event loop's own Postgres pool; a latest read may be served by Redis alone)."""
    return len([t async for t in saver.alist({"configurable": {"thread_id": thread_id}})])


def _hot_keys(client: redis.Redis, prefix: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{prefix}*"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    with tls_redis(tmp_path_factory.mktemp("tls")) as servers:
        yield servers


@pytest.mark.parametrize("verify", ["ca", "none", "client certificate"])
def test_rediss_url_with_its_ssl_settings_carries_the_hot_tier_over_tls(
        tls: TlsRedis, namespace: tuple[str, str], verify: str) -> None:
    """A ``rediss://`` URL with ``ssl_ca_certs`` (the server's certificate verified against
    a private CA), with ``ssl_cert_reqs=none``, or with a client certificate
    (``ssl_certfile``/``ssl_keyfile``, for a server that requires one) reaches a TLS-only
    Redis, from blocking and async callers: the thread's keys are on that server and reads
    come back whole."""
    ca = tls.dir / "ca.crt"
    port = tls.mtls_port if verify == "client certificate" else tls.port
    schema, prefix = namespace
    query = {"ca": f"ssl_cert_reqs=required&ssl_ca_certs={ca}",
             "none": "ssl_cert_reqs=none",
             "client certificate": f"ssl_ca_certs={ca}&ssl_certfile={tls.dir / 'client.crt'}"
                                   f"&ssl_keyfile={tls.dir / 'client.key'}"}[verify]
    url = f"rediss://127.0.0.1:{port}/0?{query}"
    verify = verify.replace(" ", "-")
    with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=f"{prefix}-{verify}") as saver:
        saver.setup()
        put_value(saver, "t-tls", {"over": "tls"})
        assert _value(saver, "t-tls") == {"over": "tls"}
        assert asyncio.run(_aread(saver, "t-tls")) == {"over": "tls"}
        assert saver.engine.context.breaker.should_probe() is False  # Redis never bypassed
    server = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(ca),
                         ssl_certfile=str(tls.dir / "client.crt"),
                         ssl_keyfile=str(tls.dir / "client.key"))
    without_certificate = redis.Redis(port=port, ssl=True, ssl_ca_certs=str(ca),
                                      socket_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        assert _hot_keys(server, f"{prefix}-{verify}") > 0
        if verify == "client-certificate":  # the server does require one
            with pytest.raises(redis.exceptions.ConnectionError):
                without_certificate.ping()
    finally:
        server.close()
        without_certificate.close()


def test_doctor_checks_a_tls_redis_with_the_url_settings(
        tls: TlsRedis, namespace: tuple[str, str]) -> None:
    """``langgraph-durable doctor --redis-url rediss://...?ssl_ca_certs=...`` connects over
    TLS with the URL's settings and reports the server."""
    url = f"rediss://127.0.0.1:{tls.port}/0?ssl_ca_certs={tls.dir / 'ca.crt'}"
    result = cli_for(namespace)("doctor", "--redis-url", url)
    line = next(line for line in result.stdout.splitlines() if f":{tls.port}/0" in line)
    assert "Redis" in line and "✔" in line, result.output


def test_credential_provider_authenticates_every_redis_connection_and_follows_rotation(
        tmp_path: Path, namespace: tuple[str, str]) -> None:
    """A Redis that only admits an ACL user: the provider's user and password open the
    saver's blocking and async connections (the provider is asked for each), and after the
    password rotates and the old sessions are killed, new connections use the new one."""
    schema, prefix = namespace
    port = free_port()
    admin = {"port": port, "password": "admin-pw"}
    args = redis_args(tmp_path, port, "--requirepass", "admin-pw",
                      "--user", "app", "on", ">token-1", "~*", "&*", "+@all")
    provider = RotatingCredentials("app", "token-1")
    with process(args, pings(**admin), log=tmp_path / "acl.log"), DurableSaver(
            f"redis://127.0.0.1:{port}/0", POSTGRES_URL, schema=schema, key_prefix=prefix,
            redis_credential_provider=provider) as saver:
        saver.setup()
        put_value(saver, "t-acl", 1)
        assert asyncio.run(_aread(saver, "t-acl")) == 1
        assert provider.calls >= 2  # a blocking and an async connection at least
        control = redis.Redis(**admin)
        try:
            assert _hot_keys(control, prefix) > 0
            control.execute_command("ACL", "SETUSER", "app", "resetpass", ">token-2")
            provider.password = "token-2"
            control.execute_command("CLIENT", "KILL", "USER", "app")
            before = provider.calls
            put_value(saver, "t-acl", 2)
            assert _value(saver, "t-acl") == 2
            assert provider.calls > before
            assert saver.engine.context.breaker.should_probe() is False
            clients = control.client_list()
            assert any(c.get("user") == "app" for c in clients)
        finally:
            control.close()


def _application_names(tag: str) -> list[str]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity "
                            "WHERE application_name LIKE %s", (f"{tag}%",)).fetchall()
    return [row[0] for row in rows]


def test_postgres_credentials_are_asked_for_at_each_new_connection(
        namespace: tuple[str, str]) -> None:
    """``postgres_credentials`` is called for every connection the saver opens, blocking
    or async, and what it returns reaches libpq (the test server trusts its clients, so
    the application name it sets is what proves the settings were used)."""
    schema, prefix = namespace
    calls: list[int] = []

    def credentials() -> dict[str, str]:
        calls.append(1)
        return {"password": f"token-{len(calls)}", "application_name": f"lgd-cred-{len(calls)}"}

    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                      postgres_credentials=credentials) as saver:
        saver.setup()
        put_value(saver, "t-cred", 1)
        assert asyncio.run(_aread(saver, "t-cred")) == 1
        assert asyncio.run(_ahistory(saver, "t-cred")) == 1  # from Postgres, async pool
        assert len(calls) >= 3  # the setup probe, the blocking pool, the async pool
        assert _application_names("lgd-cred-")


@pytest.mark.parametrize("sslmode", ["disable", "prefer"])
def test_postgres_sslmode_in_the_url_reaches_libpq(namespace: tuple[str, str],
                                                   sslmode: str) -> None:
    """``?sslmode=`` is libpq's: the saver passes the URL through unchanged (``require`` and
    ``verify-full`` with ``sslrootcert=`` work the same way against a server with TLS)."""
    schema, prefix = namespace
    url = postgres_url(query={"sslmode": sslmode, "application_name": f"lgd-ssl-{sslmode}"})
    with DurableSaver(REDIS_URL, url, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
        put_value(saver, f"t-{sslmode}", sslmode)
        assert _value(saver, f"t-{sslmode}") == sslmode
        assert _application_names(f"lgd-ssl-{sslmode}")


def test_sslmode_require_is_enforced_not_downgraded(namespace: tuple[str, str]) -> None:
    """``sslmode=require`` reaches libpq: against a server with TLS off (as this test
    server is by default) ``setup()`` fails at once naming SSL instead of running
    unencrypted; against one with TLS on it connects encrypted. Over TCP (a forwarder in
    front of the test server, which may listen on a Unix socket alone, where libpq
    ignores ``sslmode``)."""
    schema, prefix = namespace
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute("SHOW ssl").fetchone()
    forwarder = Proxy(postgres_address())
    forwarder.start()
    try:
        url = f"{forwarder.url(POSTGRES_DATABASE)}?sslmode=require"
        with DurableSaver(REDIS_URL, url, schema=schema, key_prefix=prefix) as saver:
            if row is not None and row[0] == "on":
                saver.setup()
            else:
                with pytest.raises(DurableError, match="SSL"):
                    saver.setup()
    finally:
        forwarder.cut()


@pytest.mark.parametrize(("url", "refused"), [
    ("redis+sentinel://127.0.0.1:26379/mymaster?sentinel_password=s", False),
    ("redis://127.0.0.1:6379/0?ssl_password=s", False),
    ("redis://:pw@127.0.0.1:6379/0", True),
    ("redis://127.0.0.1:6379/0?password=pw", True),
    ("redis+sentinel://app:pw@127.0.0.1:26379/mymaster", True),
])
def test_a_provider_is_refused_only_beside_another_redis_password(url: str,
                                                                  refused: bool) -> None:
    """A credential provider and a password for the same Redis user are two answers to
    one question: refused. The sentinels' own password, or a TLS key's, is another
    question: allowed."""
    provider = RotatingCredentials("app", "token")
    if refused:
        with pytest.raises(ConfigurationError, match="give the credentials one way"):
            SaverConfig(redis_url=url, redis_credential_provider=provider)
    else:
        assert SaverConfig(redis_url=url, redis_credential_provider=provider).redis_url == url
