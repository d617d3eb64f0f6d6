"""Developer and reviewer tools: the mock runtime harness and the offline plan."""
