"""Stand-in for `vllm serve` in the lab, where there is no GPU and no vLLM.

It parses its command line with the real `vllm serve` option table of the pinned vLLM
(serve_cli_spec.json, dumped by lab/vllm_cli_spec.py; plus fork_flags.py), so what vLLM rejects
it rejects, with the same exit status; it warns about VLLM_* variables vLLM does not know, with
vLLM's words (environ.py). It makes rank 1 rendezvous with rank 0 over TCP (so losing a rank is
fatal for the pair, as with NCCL), loads `vllm.general_plugins` entry points the way vLLM does,
answers an OpenAI-compatible API, and on SIGTERM aborts or drains in-flight requests as
--shutdown-timeout says (api.py). Test double only: it is never installed on a real Spark.
"""
