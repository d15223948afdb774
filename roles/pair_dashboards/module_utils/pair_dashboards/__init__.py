"""One Grafana dashboard per Spark pair: its JSON model, its queries and the checks it must pass."""
