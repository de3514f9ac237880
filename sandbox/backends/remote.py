"""Remote backend: judge on our own server (`python -m sandbox serve`, POST /judge), or on a
SandboxFusion server through its `/run_code` API (one request per test; comparison stays here).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Literal

from ..verdict import JudgeResult, SandboxError
from .base import Backend

PROTOCOLS = ("xrpo", "sandboxfusion")


class RemoteBackend(Backend):
    name = "remote"

    def __init__(self, url: str, protocol: Literal["xrpo", "sandboxfusion"] = "xrpo", timeout_s: float = 600.0) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown remote protocol {protocol!r}; choose one of {PROTOCOLS}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"remote url must start with http:// or https://, got {url!r}")
        self.url, self.protocol, self.timeout_s = url.rstrip("/"), protocol, timeout_s

    def session(self):
        raise NotImplementedError("the remote backend judges whole submissions; use judge(..., backend=remote)")

    def post(self, path: str, body: dict) -> dict:
        """POST JSON; a 400 answer is the caller's mistake (ValueError), anything else is SandboxError."""
        req = urllib.request.Request(self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode(errors="replace")
            if e.code == 400:
                raise ValueError(f"remote sandbox rejected the request: {detail}") from None
            raise SandboxError(f"remote sandbox answered HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as e:
            raise SandboxError(f"remote sandbox at {self.url} failed: {e}") from None

    def judge_remote(self, problem: dict, code: str, language: str, stop_on_first_failure: bool) -> JudgeResult:
        body = {"problem": problem, "code": code, "language": language, "stop_on_first_failure": stop_on_first_failure}
        return JudgeResult.from_dict(self.post("/judge", body))
