"""Running gpubot as a service: Prometheus metrics (:mod:`.metrics`), structured logs with secrets
redacted (:mod:`.logs`) and the readiness checks behind ``/readyz`` (:mod:`.health`)."""
