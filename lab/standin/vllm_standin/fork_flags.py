"""The flags the production image (a vLLM fork) adds on top of stock vLLM's `vllm serve`.

The stand-in parses with stock vLLM's option table (lab/vllm_cli_spec.py) plus the actions below.
Add a flag only when the fork's own launch passes it and the stock parser rejects it
(tests/service/test_standin.py checks that, and that none shadows a stock flag). The list is
empty: every flag of the reference launch (Entrpi/glm-5.3-flash-exl3-2x-spark,
scripts/launch-glm53-vllm-tp2.sh) and of the units parses with stock 0.34.0, some as free strings
checked only when the engine config is built (--quantization exl3, --load-format instanttensor,
the parsers, --distributed-executor-backend, --kv-cache-dtype), and --kv-cache-memory as
argparse's prefix abbreviation of --kv-cache-memory-bytes (a fork flag sharing that prefix would
make it ambiguous, here as in the fork).
"""

from __future__ import annotations

from typing import Any

# Each entry: the keys lab/vllm_cli_spec.py writes for an action, and a "why" naming where the
# fork's launch passes it.
FORK_ONLY_FLAGS: tuple[dict[str, Any], ...] = ()
