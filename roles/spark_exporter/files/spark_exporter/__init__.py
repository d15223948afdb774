"""The Spark exporter: what node_exporter cannot read on a DGX Spark, for Prometheus.

One module per source (gpu, rail, nccl, overlay, tls, memory), each reading fresh at every
scrape, without root and never a secret; `exposition` writes the text format, `server` serves
it. Shipped to the nodes by the spark_exporter role, so it uses the standard library only.

    python3 -m spark_exporter --port 9835 --twin enp1s0f1np1 --twin enP2p1s0f1np1 ...
"""
