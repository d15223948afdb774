"""Run one node of the pair: rank 0 (rendezvous master + API) or rank 1 (headless worker)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import signal
import threading
import time
from typing import Any

from vllm_standin import api, link, plugins
from vllm_standin.behaviour import Behaviour

logger = logging.getLogger("vllm.standin")
SHARD_TIMEOUT_S = 10.0
# docker stop's grace period bounds the drain; this only keeps a stuck request from hanging it.
DRAIN_LIMIT_S = 3600.0


class Stop:
    """Set by a signal or by the peer; the main thread waits on it and exits with its code."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.code = 0
        self.reason = ""
        self.running = (
            False  # set once the node has joined its group; before, a signal just ends it
        )

    def set(self, code: int, reason: str) -> None:
        if not self.event.is_set():
            self.code, self.reason = code, reason
            self.event.set()


def lose_peer(reason: str) -> None:
    # An engine whose TP peer is gone cannot serve; vLLM's processes die, so does this one.
    logger.error("RuntimeError: tensor-parallel group broken: %s; exiting", reason)
    logging.shutdown()
    os._exit(1)


def prepare(args: argparse.Namespace, behaviour: Behaviour) -> list[dict[str, str]] | None:
    """Load plugins and 'weights'; None when the node must not come up."""
    logger.info(
        "vLLM stand-in: serve %s tp=%d nnodes=%d node_rank=%d headless=%s",
        args.model,
        args.tensor_parallel_size,
        args.nnodes,
        args.node_rank,
        args.headless,
    )
    try:
        reports = plugins.load_general_plugins()
    except plugins.PluginCallError as exc:
        logger.error("%s", exc)
        return None
    if behaviour.start_delay_s > 0:
        logger.info("loading weights (stand-in: %.1f s)", behaviour.start_delay_s)
        time.sleep(behaviour.start_delay_s)
    if behaviour.fail == "load":
        logger.error("RuntimeError: weight loading failed (injected by STANDIN_FAIL=load)")
        return None
    return reports


def hello(args: argparse.Namespace, reports: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "type": "hello",
        "rank": args.node_rank,
        "nnodes": args.nnodes,
        "tp": args.tensor_parallel_size,
        "model": args.model,
        "plugins": reports,
    }


def mismatch(mine: dict[str, Any], theirs: dict[str, Any]) -> str:
    for key in ("nnodes", "tp", "model"):
        if mine[key] != theirs.get(key):
            return f"{key}: rank 0 has {mine[key]!r}, rank 1 has {theirs.get(key)!r}"
    return ""


def on_signals(stop: Stop) -> None:
    def handle(signum: int, _frame: object) -> None:
        if not stop.running:
            # Still loading or waiting for the peer: nothing to drain, stop now (as vLLM does).
            logger.info("%s while starting; exiting", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(0)
        stop.set(0, signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)


def run(args: argparse.Namespace, behaviour: Behaviour, api_key: str | None) -> int:
    stop = Stop()
    on_signals(stop)
    reports = prepare(args, behaviour)
    if reports is None:
        return 1
    try:
        if args.node_rank == 0:
            return run_rank0(args, behaviour, api_key, reports, stop)
        return run_rank1(args, behaviour, reports, stop)
    except link.RendezvousError as exc:
        logger.error("RendezvousError: %s", exc)
        return 1


def run_rank0(
    args: argparse.Namespace,
    behaviour: Behaviour,
    api_key: str | None,
    reports: list[dict[str, str]],
    stop: Stop,
) -> int:
    peer = link.accept_peer(args.master_addr, args.master_port, behaviour.rendezvous_timeout_s)
    theirs = peer.receive() or {}
    problem = mismatch(hello(args, reports), theirs)
    if theirs.get("type") != "hello" or problem:
        peer.send({"type": "reject", "reason": problem or "no hello"})
        raise link.RendezvousError(f"rank 1 does not match this group ({problem or 'no hello'})")
    peer.send({"type": "welcome"})

    def read() -> None:
        while True:
            message = peer.receive()
            if message is None:
                if not peer.closing:
                    lose_peer("connection to rank 1 closed")
                return
            if message.get("type") == "shard_done":
                peer.deliver_reply(message)

    threading.Thread(target=read, name="link-reader", daemon=True).start()
    peer.start_heartbeat(lose_peer)
    peer.watch_silence(behaviour.heartbeat_timeout_s, lose_peer)

    def ask_rank1(prompt: str) -> dict[str, Any]:
        return peer.request({"type": "shard", "prompt": prompt}, SHARD_TIMEOUT_S)

    state = api.ApiState(
        served_model=args.served_model_name or args.model,
        model_path=args.model,
        max_model_len=args.max_model_len,
        api_key=api_key,
        completion=behaviour.completion,
        completion_delay_s=behaviour.completion_delay_s,
        ask_rank1=ask_rank1,
        plugin_reports={"0": reports, "1": theirs.get("plugins", [])},
    )
    server = api.make_server(args.host, args.port, state)
    stop.running = True
    # shutdown() waits for the serve loop's next poll: a short one closes the listener promptly
    # after SIGTERM, as vLLM's server does (the default 0.5 s let new requests in meanwhile).
    serve = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="http", daemon=True
    )
    serve.start()
    logger.info("Starting vLLM API server on http://%s:%d", args.host, args.port)
    logger.info("Application startup complete.")
    stop.event.wait()
    logger.info("Shutting down on %s: no new requests; draining", stop.reason)
    state.draining = True
    server.shutdown()
    api.stop_listening(server)
    unfinished = state.drain(DRAIN_LIMIT_S)
    server.server_close()
    logger.info("Drained (%d requests unfinished); closing the group", unfinished)
    peer.closing = True
    with contextlib.suppress(OSError):
        peer.send({"type": "shutdown"})
    peer.close()
    return stop.code


def run_rank1(
    args: argparse.Namespace, behaviour: Behaviour, reports: list[dict[str, str]], stop: Stop
) -> int:
    peer = link.connect_to_master(
        args.master_addr, args.master_port, behaviour.rendezvous_timeout_s
    )
    peer.send(hello(args, reports))
    answer = peer.receive() or {}
    if answer.get("type") != "welcome":
        raise link.RendezvousError(f"rank 0 refused this node: {answer.get('reason', 'no answer')}")
    logger.info("joined the tensor-parallel group as rank %d (headless)", args.node_rank)
    stop.running = True

    def read() -> None:
        while True:
            message = peer.receive()
            if message is None:
                if not peer.closing:
                    lose_peer("connection to rank 0 closed")
                return
            kind = message.get("type")
            if kind == "shard":
                digest = hashlib.sha256(message["prompt"].encode()).hexdigest()[:12]
                peer.send({"type": "shard_done", "id": message["id"], "rank": 1, "digest": digest})
            elif kind == "shutdown":
                peer.closing = True
                stop.set(0, "rank 0 closed the group")
                return

    threading.Thread(target=read, name="link-reader", daemon=True).start()
    peer.start_heartbeat(lose_peer)
    peer.watch_silence(behaviour.heartbeat_timeout_s, lose_peer)
    stop.event.wait()
    logger.info("Shutting down: %s", stop.reason)
    peer.closing = True
    peer.close()
    return stop.code
