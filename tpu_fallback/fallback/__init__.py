"""The fallback controller: plan A -> plan B on a stock-out, and back to plan A when it has room again; on a
capacity ladder (config.json "rungs"), each rung closed and reopened on its own evidence and jobs moved up.

Runs in the cluster from the public distroless Python image, its source mounted from a ConfigMap (no image to
build or push), so it imports only the standard library, itself and tpu_fallback.model.quantity
(tpu_fallback/render/fallback.py ships exactly those files; tests/test_fallback.py checks the set is closed).
"""
