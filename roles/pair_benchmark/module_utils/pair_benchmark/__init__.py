"""Results of `vllm bench serve` against the pair, set beside the reference deployment's figures."""
