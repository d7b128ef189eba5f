"""One router per resource; ``engine.server.app`` assembles them."""
