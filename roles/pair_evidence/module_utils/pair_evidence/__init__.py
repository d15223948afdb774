"""Parsers for the evidence a Spark pair gives of its rail: NCCL logs, all-reduce, RDMA figures."""
