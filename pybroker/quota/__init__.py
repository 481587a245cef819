"""Client quotas (Kafka's): produce/fetch byte rates and request percentage per user / client-id.

``entities`` holds the stored quota configs, ``manager`` measures and throttles, ``store`` keeps
them durably (a file in the first log dir on a single node, ZooKeeper on a cluster).
"""
