"""TLS: ``serve-retriever`` over HTTPS as a real process with a self-signed certificate made here,
the retriever client and the factory's searcher verifying it against a CA bundle, and ``serve``
handing its certificate to uvicorn. Before, neither server took a certificate and the clients
could not be given a CA: a cross-node retriever sent its key and passages in cleartext.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import httpx
import pytest
from conftest import free_port, needs_data
from serving import BIN, ServerProcess, copy_store, record, store_env

pytestmark = [needs_data, pytest.mark.serving]
KEY = "tls-key-0123456789"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key (cert.pem is its CA bundle)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "parallelsearch test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def https_retriever(hotpot_store, tmp_path_factory, _model_cache):
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = self_signed(tmp)
    store_dir = copy_store(hotpot_store, tmp / "chroma")
    port = free_port()
    env = store_env(tmp, store_dir, PARALLELSEARCH_MODEL_CACHE_DIR=str(_model_cache))
    env["PARALLELSEARCH_RETRIEVER_API_KEY"] = KEY
    cmd = [str(BIN / "parallelsearch"), "serve-retriever", "--store", hotpot_store.name, "--port", str(port),
           "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    srv = ServerProcess(
        cmd, env=env, cwd=tmp, log=tmp / "retriever.log", port=port,
        probe=lambda: httpx.get(url + "/health", verify=str(cert), timeout=5),
    )  # fmt: skip
    srv.start()
    record("parallelsearch serve-retriever (TLS): start until /health", srv.ready_s)
    try:
        yield url, cert
    finally:
        srv.kill()


@pytest.mark.slow
def test_the_retriever_serves_https_and_the_client_verifies_it_with_the_bundle(https_retriever):
    from parallelsearch.stores import RetrieverClient

    url, cert = https_retriever
    client = RetrieverClient(url, api_key=KEY, ca_bundle=cert)
    assert client.search("Ed Wood", 1)[0].title == "Ed Wood"
    with pytest.raises(httpx.HTTPError):  # the port speaks TLS only
        httpx.get(url.replace("https://", "http://") + "/health", timeout=5)


def test_a_certificate_the_client_cannot_verify_is_one_error_naming_the_setting(https_retriever):
    from parallelsearch.stores import RetrieverClient, RetrieverError

    url, _ = https_retriever
    client = RetrieverClient(url, api_key=KEY, retries=3, backoff_s=0.01)  # certifi's bundle only
    with pytest.raises(RetrieverError) as err:
        client.search("Ed Wood", 1)
    assert "could not be verified" in str(err.value) and "PARALLELSEARCH_RETRIEVER_CA_BUNDLE" in str(
        err.value
    )
    assert client.requests == 1, "a certificate that cannot be verified is not retried"


def test_the_factory_searcher_and_the_agent_config_take_the_bundle(https_retriever, monkeypatch):
    import asyncio

    from parallelsearch.graphs.factory import make_searcher
    from parallelsearch.settings import get_settings

    url, cert = https_retriever
    monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_URL", url + "/retrieve")
    monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_API_KEY", KEY)
    monkeypatch.setenv("PARALLELSEARCH_RETRIEVER_CA_BUNDLE", str(cert))
    monkeypatch.delenv("PARALLELSEARCH_STORES", raising=False)
    searcher = make_searcher(get_settings().retrieval())
    hits = asyncio.run(searcher.asearch("Scott Derrickson", 1))
    assert hits[0].title == "Scott Derrickson"
    from parallelsearch.rl.agent_config import AgentConfig

    agent = AgentConfig(retriever_url=url + "/retrieve", retriever_ca_bundle=cert, retriever_api_key=KEY)
    assert asyncio.run(agent.make_searcher().asearch("Ed Wood", 1))[0].title == "Ed Wood"


def test_serve_hands_its_certificate_to_uvicorn(hotpot_store, tmp_path, monkeypatch, capsys):
    import uvicorn

    from parallelsearch.cli import main

    cert, key = self_signed(tmp_path)
    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    monkeypatch.setenv("PARALLELSEARCH_CHROMA_PATH", hotpot_store.location)
    argv = ["serve", "--store", hotpot_store.name, "--policy", "oracle", "--checkpointer", "none"]
    assert main([*argv, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]) == 0
    assert (seen["ssl_certfile"], seen["ssl_keyfile"]) == (str(cert), str(key))
    capsys.readouterr()
    assert main([*argv, "--ssl-certfile", str(cert)]) == 2
    assert "server_ssl_certfile and server_ssl_keyfile go together" in capsys.readouterr().err
    assert main([*argv, "--ssl-certfile", str(cert), "--ssl-keyfile", str(tmp_path / "nope.pem")]) == 2
    assert "the TLS key file" in capsys.readouterr().err
