"""tpu-fallback: Pulumi components and the pure logic they are built from."""
