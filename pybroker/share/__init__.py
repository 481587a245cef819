"""Share groups (KIP-932): Kafka topics consumed as queues, record by record, with acquisition locks."""
