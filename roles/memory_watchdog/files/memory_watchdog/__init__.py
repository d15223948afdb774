"""The memory watchdog: drains the pair before unified memory swap-wedges a Spark.

It samples MemAvailable every interval; when this box (or, on rank 0, its peer, read from the
peer's spark exporter) stays under the floor for a number of samples in a row, it runs the drain
command once: by default rank 0 stops its vLLM unit, which stops admitting requests and finishes
those in flight. It never restarts the service. Shipped to the nodes by the memory_watchdog role,
so it uses the standard library only.

    python3 -m memory_watchdog --floor-bytes N --samples 5 [--peer-url URL] -- DRAIN COMMAND...
"""
