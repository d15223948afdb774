"""How the stand-in misbehaves on purpose: read from STANDIN_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

FAIL_CHOICES = ("", "load")


@dataclass(frozen=True)
class Behaviour:
    start_delay_s: float = 0.0  # simulated weight loading before the rendezvous
    fail: str = ""  # "load": exit with an error after the loading delay
    completion: str = " stand-in completion"  # the text every completion answers
    completion_delay_s: float = 0.0  # simulated generation time per request
    rendezvous_timeout_s: float = 600.0  # torch's default rendezvous timeout
    heartbeat_timeout_s: float = 5.0  # silence from the peer after which the pair is lost
    kv_cache_tokens: int = 4096  # nominal KV-cache capacity behind vllm:kv_cache_usage_perc


def load(env: Mapping[str, str] | None = None) -> Behaviour:
    env = os.environ if env is None else env
    fail = env.get("STANDIN_FAIL", "").strip()
    if fail not in FAIL_CHOICES:
        raise ValueError(f"STANDIN_FAIL={fail!r} must be one of {FAIL_CHOICES}")
    defaults = Behaviour()
    kv_cache_tokens = int(env.get("STANDIN_KV_CACHE_TOKENS", defaults.kv_cache_tokens))
    if kv_cache_tokens < 1:
        raise ValueError(f"STANDIN_KV_CACHE_TOKENS={kv_cache_tokens} must be 1 or more")
    return Behaviour(
        start_delay_s=float(env.get("STANDIN_START_DELAY_S", defaults.start_delay_s)),
        fail=fail,
        completion=env.get("STANDIN_COMPLETION", defaults.completion),
        completion_delay_s=float(
            env.get("STANDIN_COMPLETION_DELAY_S", defaults.completion_delay_s)
        ),
        rendezvous_timeout_s=float(
            env.get("STANDIN_RENDEZVOUS_TIMEOUT_S", defaults.rendezvous_timeout_s)
        ),
        heartbeat_timeout_s=float(
            env.get("STANDIN_HEARTBEAT_TIMEOUT_S", defaults.heartbeat_timeout_s)
        ),
        kv_cache_tokens=kv_cache_tokens,
    )
