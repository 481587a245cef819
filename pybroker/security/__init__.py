"""Security: TLS transport, SASL authentication, principals and ACL authorization."""
