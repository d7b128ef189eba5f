"""One router per resource; ``tuner.sidecar.app`` assembles them."""
