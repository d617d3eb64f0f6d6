"""Pure model: the TPU catalog, capacity and quota arithmetic, settings and jobs config. Never imports Pulumi."""
