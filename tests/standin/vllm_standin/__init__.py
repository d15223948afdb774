"""Stand-in for `vllm serve` in the lab, where there is no GPU and no vLLM.

It takes the same command line as a two-node tensor-parallel vLLM deployment, makes rank 1
rendezvous with rank 0 over TCP (so losing a rank is fatal for the pair, as with NCCL), loads
`vllm.general_plugins` entry points the way vLLM does, and answers an OpenAI-compatible API.
Test double only: it is never installed on a real Spark.
"""
