"""Read-only diagnosis of a Spark pair: observe each node, judge the pair, a fix per finding."""
