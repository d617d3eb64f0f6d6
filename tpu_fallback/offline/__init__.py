"""Running the programs without a cloud or the Pulumi CLI: the mock-runtime harness and the offline plan."""
