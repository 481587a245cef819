"""Kafka's transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase commit of each transaction, kept durable in the internal topic ``__transaction_state``."""
