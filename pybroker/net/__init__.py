"""Network layer: listeners and connections (size framing, ordered responses, zero-copy sends)."""
