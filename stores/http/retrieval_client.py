"""Client for any server speaking Search-R1's ``/retrieve`` protocol (ours, Search-R1's and
ParallelSearch's ``retrieval_server.py``).

Concurrent async single queries are coalesced into one request; every request has a timeout
and transient failures are retried a bounded number of times. A key travels as ``X-API-Key``;
a 401 is :class:`RetrieverAuthError` at once, and no message holds the key.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from parallelsearch.stores.coalesced_search import CoalescedSearch
from parallelsearch.stores.errors import ParallelSearchError
from parallelsearch.stores.http.tls import tls_context
from parallelsearch.stores.passages import Passage, split_contents
from parallelsearch.stores.redact import split_credentials


class RetrieverError(ParallelSearchError, RuntimeError):
    """The retrieval server failed or answered something that is not the protocol."""

    http_status = 502


class RetrieverAuthError(RetrieverError):
    """The retrieval server refused the request (401): the key was missing or wrong."""


#: where a client's key comes from, named in the 401 message
KEY_SETTING = "PARALLELSEARCH_RETRIEVER_API_KEY (retriever_api_key in a config file or the agent config)"


#: where a client's CA bundle comes from, named when a certificate cannot be verified
CA_SETTING = "PARALLELSEARCH_RETRIEVER_CA_BUNDLE (retriever_ca_bundle; --retriever-ca-bundle)"


def _unverified(e: BaseException) -> str | None:
    """The reason a TLS certificate was refused, when that is what ``e`` (or its cause) is."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def parse_result(result: Any, store: str | None = None) -> list[list[Passage]]:
    """Turn a ``result`` list (with or without scores) into passages."""
    if not isinstance(result, list):
        raise RetrieverError(f"'result' must be a list, got {type(result).__name__}")
    out = []
    for per_query in result:
        row = []
        for item in per_query:
            doc, score = item, None
            if isinstance(item, dict) and "document" in item:
                doc, score = item["document"], item.get("score")
            if not isinstance(doc, dict) or "contents" not in doc:
                raise RetrieverError(f"document without 'contents': {str(doc)[:200]}")
            contents = doc["contents"]
            if not isinstance(contents, str):
                raise RetrieverError(f"document 'contents' is {type(contents).__name__}, not text")
            title, text = split_contents(contents)
            score = None if score is None else float(score)
            heading = contents.partition("\n")[0]
            row.append(Passage(str(doc.get("id", "")), title, text, score, store, heading=heading))
        out.append(row)
    return out


class RetrieverClient(CoalescedSearch):
    """Search a remote ``/retrieve`` endpoint. ``url`` may end in ``/retrieve`` or be the server root."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        name: str | None = None,
        api_key: str | SecretStr | None = None,
        ca_bundle: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        url, self._auth = split_credentials(
            url.rstrip("/")
        )  # a password goes in a header, never in a message
        self.base = url[: -len("/retrieve")] if url.endswith("/retrieve") else url
        self.url = self.base + "/retrieve"
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.name = name or self.base
        self.requests = 0  # HTTP requests sent (tests read it)
        self._tls = tls_context(ca_bundle)  # certificates verified against ca_bundle (or certifi's)
        value = (api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key or "").strip()
        if not value.isprintable():  # a header cannot carry a line break; h11 would echo it
            raise ValueError("the retriever API key holds a control character (a line break?)")
        self._api_key = SecretStr(value) if value else None  # an empty key is no key
        self._headers: dict[str, bytes] = {"X-API-Key": value.encode("utf-8")} if value else {}

    def __repr__(self) -> str:
        key = ", api_key='**********'" if self._api_key is not None else ""
        return f"RetrieverClient({self.url!r}{key})"

    def _refused(self) -> RetrieverAuthError:
        if self._api_key is None:
            why = f"no API key was sent; set {KEY_SETTING}"
        else:
            why = f"the API key sent is wrong; check {KEY_SETTING}"
        return RetrieverAuthError(f"{self.url} answered 401: {why}")

    def _check(self, resp: httpx.Response, n: int) -> list[list[Passage]]:
        if resp.status_code == 401:
            raise self._refused()
        if resp.status_code >= 400:
            raise RetrieverError(f"{self.url} answered {resp.status_code}: {resp.text[:300]}")
        try:
            body = resp.json()
        except ValueError as e:
            raise RetrieverError(f"{self.url} answered non-JSON: {resp.text[:200]}") from e
        if not isinstance(body, dict) or "result" not in body:
            raise RetrieverError(f"{self.url} answered without 'result': {str(body)[:200]}")
        res = parse_result(body["result"], store=self.name)
        if len(res) != n:
            raise RetrieverError(f"{self.url} returned {len(res)} result lists for {n} queries")
        missing = body.get("missing_shards")
        if isinstance(missing, dict) and missing:  # a sharded store answered without some shards
            from parallelsearch.stores.sharded_store import ShardHits

            gone = {str(label): str(err) for label, err in missing.items()}
            return [ShardHits(hits, gone) for hits in res]
        return res

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        if not queries:
            return []
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                self.requests += 1
                resp = httpx.post(
                    self.url,
                    json={"queries": list(queries), "topk": int(k), "return_scores": True},
                    headers=self._headers,
                    timeout=self.timeout_s,
                    verify=self._tls,
                    auth=self._auth,
                )
                if resp.status_code >= 500 and attempt < self.retries:
                    last = RetrieverError(f"{self.url} answered {resp.status_code}")
                else:
                    return self._check(resp, len(queries))
            except (httpx.TransportError, httpx.TimeoutException) as e:
                if _unverified(e):  # not transient: no retry
                    raise RetrieverError(
                        f"{self.url}: the server's certificate could not be verified ({_unverified(e)}); "
                        f"give its CA certificate with {CA_SETTING}"
                    ) from e
                last = e
            time.sleep(self.backoff_s * (2**attempt))
        raise RetrieverError(f"{self.url} failed after {self.retries + 1} attempts: {last}")

    def health(self) -> dict[str, Any]:
        resp = httpx.get(
            self.base + "/health",
            headers=self._headers,
            timeout=self.timeout_s,
            verify=self._tls,
            auth=self._auth,
        )
        if resp.status_code == 401:  # a proxy or server that keys /health too
            raise self._refused()
        resp.raise_for_status()
        return resp.json()

    def count(self) -> int:
        return int(self.health().get("passages", 0))
