"""The flags the production image (a vLLM fork) adds on top of stock vLLM's `vllm serve`.

The stand-in's parser is stock vLLM's (serve_cli_spec.json, dumped from the pinned release by
lab/vllm_cli_spec.py) plus the actions below, in the spec's format. Add a flag here only when
the fork's own launch passes it and the stock parser rejects it; tests/service/test_standin.py
checks both (the real parser must reject every flag listed, and none may shadow a stock one).

Compared with stock 0.34.0, every flag of the reference launch (Entrpi/glm-5.3-flash-exl3-2x-spark,
scripts/launch-glm53-vllm-tp2.sh) and of the units is stock, so the list is empty:
  --quantization exl3, --load-format instanttensor, --tool-call-parser glm47,
  --reasoning-parser glm45, --distributed-executor-backend mp: free strings at parse time
      (stock checks these values only when it builds the engine config);
  --kv-cache-memory 12400000000: argparse's unique-prefix abbreviation of stock
      --kv-cache-memory-bytes (a fork flag starting with the same letters would make it
      ambiguous: add such a flag here and the stand-in fails the same way);
  --max-num-seqs, --block-size, --kv-cache-dtype fp8_e4m3 (a free string in 0.34.0),
  --mm-processor-cache-gb, --default-chat-template-kwargs, --shutdown-timeout,
  --linear-backend marlin (a stock choice), --kda-prefill-backend, --prefix-match-unit,
  --kv-cache-dtype-skip-layers, --attention-backend, --enable-auto-tool-choice,
  --skip-mm-profiling, --enforce-eager: stock options.
"""

from __future__ import annotations

from typing import Any

# Each entry: the keys lab/vllm_cli_spec.py writes for an action, and a "why" naming where the
# fork's launch passes it.
FORK_ONLY_FLAGS: tuple[dict[str, Any], ...] = ()
