"""Build and prove the low-latency checkpoint: harnesses (latency) live here."""
