"""A small Python client of AdaPtis Studio's REST API, for the scripts our users write around it.

Standard library only, so it runs wherever Python does (a laptop, a login node, a CI job) without the product's
dependencies. Authenticate with an API token (created on the Tokens page or ``POST /api/tokens/``), or with a
username and password for a session as the pages use (the run page's HTML is only served to a session)::

    from adaptis_client import Client
    studio = Client("https://studio.example.com", token=open("token").read().strip())
    job = studio.post("/api/jobs/", {"spec": 3, "cluster_preset": "h100-sxm-1x8", "num_devices": 8,
                                     "num_microbatches": 32, "schedule": "adaptis"})
    job = studio.wait(f"/api/jobs/{job['id']}/")
    plan = studio.get(f"/api/plans/{job['plans'][0]['id']}/")

Every refusal raises ``ApiError`` with the HTTP status and the API's JSON body (which names the field and the
reason). ``python -m adaptis_client --help`` offers the same from a shell.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from typing import Iterator

FINISHED = ("succeeded", "failed", "cancelled")


class ApiError(Exception):
    """The API refused a request: ``status`` is the HTTP status, ``body`` its decoded JSON (or text)."""

    def __init__(self, method: str, path: str, status: int, body):
        self.method, self.path, self.status, self.body = method, path, status, body
        hint = " (too many requests: the product's THROTTLE_* settings limit them per user)" if status == 429 else ""
        super().__init__(f"{method} {path}: HTTP {status} {json.dumps(body) if not isinstance(body, str) else body}"
                         f"{hint}")


class Client:
    def __init__(self, url: str, *, token: str | None = None, username: str | None = None,
                 password: str | None = None, timeout_s: float = 60):
        if token is None and (username is None or password is None):
            raise ValueError("give a token, or a username and a password")
        self.base_url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._cookies = CookieJar()
        self._opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self._cookies))
        if token is None:
            self._log_in(username, password)

    def _csrf(self) -> str:
        return next(cookie.value for cookie in self._cookies if cookie.name == "csrftoken")

    def _log_in(self, username: str, password: str) -> None:
        login = f"{self.base_url}/accounts/login/"
        self._opener.open(login, timeout=self.timeout_s).read()
        form = urllib.parse.urlencode({"username": username, "password": password,
                                       "csrfmiddlewaretoken": self._csrf()}).encode()
        request = urllib.request.Request(login, data=form, method="POST", headers={"Referer": login})
        with self._opener.open(request, timeout=self.timeout_s) as response:
            if "/accounts/login/" in response.url:
                raise ApiError("POST", "/accounts/login/", 403, f"could not log in as {username!r}")

    def request(self, method: str, path: str, body: dict | None = None, *,
                accept: str = "application/json") -> bytes:
        """The raw answer to ``method path`` (a path under the product's address, with its query string)."""
        headers = {"Accept": accept}
        data = None
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if not self.token and method not in ("GET", "HEAD"):
            headers.update({"X-CSRFToken": self._csrf(), "Referer": self.base_url + "/"})
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            text = error.read().decode(errors="replace")
            try:
                detail = json.loads(text)
            except ValueError:
                detail = text[:2000]
            raise ApiError(method, path, error.code, detail) from None

    def _json(self, method: str, path: str, body: dict | None = None, params: dict | None = None):
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        answer = self.request(method, path + query, body)
        return json.loads(answer) if answer else None

    def get(self, path: str, **params):
        return self._json("GET", path, params=params)

    def post(self, path: str, body: dict | None = None):
        return self._json("POST", path, body if body is not None else {})

    def patch(self, path: str, body: dict):
        return self._json("PATCH", path, body)

    def delete(self, path: str):
        return self._json("DELETE", path)

    def endpoints(self) -> list[dict]:
        """The API's index (``GET /api/``): every endpoint's name, path template and methods."""
        return self.get("/api/")["endpoints"]

    def pages(self, path: str, **params) -> Iterator[dict]:
        """Every row of a listing, following its ``next`` links (offset and cursor pages alike)."""
        page = self.get(path, **params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            following = urllib.parse.urlsplit(page["next"])
            page = self._json("GET", f"{following.path}?{following.query}")

    def wait(self, path: str, *, timeout_s: float = 1800, interval_s: float = 1.0) -> dict:
        """``GET path`` until its ``status`` is final (a job, a run, a measured profile); TimeoutError after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.get(path)
            if body["status"] in FINISHED:
                return body
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} is still {body['status']} after {timeout_s:g} s")
            time.sleep(interval_s)
