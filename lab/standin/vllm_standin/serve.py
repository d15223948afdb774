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

from vllm_standin import api, link, metrics, model, plugins
from vllm_standin.behaviour import Behaviour

logger = logging.getLogger("vllm.standin")
SHARD_TIMEOUT_S = 10.0


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
    model.load(args.linear_backend)  # the stand-in model; says so loudly when it cannot run
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


def run(args: argparse.Namespace, behaviour: Behaviour, api_keys: tuple[str, ...]) -> int:
    stop = Stop()
    on_signals(stop)
    reports = prepare(args, behaviour)
    if reports is None:
        return 1
    try:
        if args.node_rank == 0:
            return run_rank0(args, behaviour, api_keys, reports, stop)
        return run_rank1(args, behaviour, reports, stop)
    except link.RendezvousError as exc:
        logger.error("RendezvousError: %s", exc)
        return 1


def run_rank0(
    args: argparse.Namespace,
    behaviour: Behaviour,
    api_keys: tuple[str, ...],
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

    def ask_rank1(prompt: str, work: model.Work) -> dict[str, Any]:
        shard = {"type": "shard", "prompt": prompt, **work.to_message()}
        return peer.request(shard, SHARD_TIMEOUT_S)

    state = api.ApiState(
        # --served-model-name takes several names (nargs +); the stand-in serves the first.
        served_model=(args.served_model_name or [args.model])[0],
        model_path=args.model,
        max_model_len=args.max_model_len,
        api_keys=api_keys,
        completion=behaviour.completion,
        completion_delay_s=behaviour.completion_delay_s,
        ask_rank1=ask_rank1,
        plugin_reports={"0": reports, "1": theirs.get("plugins", [])},
        max_num_seqs=args.max_num_seqs or metrics.DEFAULT_MAX_NUM_SEQS,
        kv_cache_tokens=behaviour.kv_cache_tokens,
    )
    server = api.make_server(args.host or "", args.port, state)  # no --host: every address
    stop.running = True
    # shutdown() waits for the serve loop's next poll: a short one closes the listener promptly
    # once the engine has stopped (the default 0.5 s let requests in meanwhile).
    serve = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="http", daemon=True
    )
    serve.start()
    logger.info("Starting vLLM API server on http://%s:%d", args.host or "0.0.0.0", args.port)
    logger.info("Application startup complete.")
    stop.event.wait()
    # vLLM's order (launcher.py, handle_shutdown): the engine first, the HTTP server still
    # serving meanwhile; then the HTTP server.
    timeout = args.shutdown_timeout
    logger.info("[shutdown] API server: shutdown triggered (%s)", stop.reason)
    mode = "abort" if timeout == 0 else "drain"
    logger.info("[shutdown] API server: stopping engine client mode=%s timeout=%ss", mode, timeout)
    lost = state.shut_down(timeout)
    if lost and timeout == 0:
        logger.info("[shutdown] EngineCore: aborting in-flight requests count=%d", lost)
    elif lost:  # vLLM kills the engine at the deadline (vllm/v1/utils.py, shutdown)
        logger.warning("[shutdown] Process manager: force killing; %d requests lost", lost)
    logger.info("[shutdown] API server: engine client stopped")
    server.shutdown()
    api.stop_listening(server)
    server.server_close()
    logger.info("[shutdown] API server: HTTP server closed; closing the group")
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

    def answer_shard(message: dict[str, Any]) -> None:
        model.run(model.Work.of_message(message))  # this rank's share of the request's steps
        digest = hashlib.sha256(message["prompt"].encode()).hexdigest()[:12]
        with contextlib.suppress(OSError):  # rank 0 gone meanwhile: the reader handles that
            peer.send({"type": "shard_done", "id": message["id"], "rank": 1, "digest": digest})

    def read() -> None:
        while True:
            message = peer.receive()
            if message is None:
                if not peer.closing:
                    lose_peer("connection to rank 0 closed")
                return
            kind = message.get("type")
            if kind == "shard":
                # Off the reader thread: it must keep taking heartbeats while the model runs.
                threading.Thread(target=answer_shard, args=(message,), daemon=True).start()
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
