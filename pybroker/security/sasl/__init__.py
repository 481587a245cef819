"""SASL on the broker: PLAIN and SCRAM-SHA-256/512 exchanges, JAAS config, per-listener settings.

``settings`` reads Kafka's ``sasl.*`` keys, ``jaas`` parses ``sasl.jaas.config`` values, ``plain`` and
``scram`` are the server side of each mechanism, ``authenticator`` drives an exchange on a
connection's session (handshake, tokens, failure delay, audit line, re-authentication deadline).
"""
