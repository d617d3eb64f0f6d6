"""Kubernetes quantities: parsing, and the canonical form the API server (Go's resource.Quantity) writes back."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tpu_fallback.model.quantity import canonical_quantity, parse_quantity

# Canonical forms as apimachinery's resource.Quantity prints them (k8s.io/apimachinery/pkg/api/resource,
# quantity_test.go's canonical cases): decimal amounts in multiples of 10^3 with an integer mantissa, binary
# amounts in powers of 1024 while exact, the exponent form kept, small binary amounts shown as decimal.
CANONICAL = [
    (10, "10"), ("10", "10"), (0, "0"), ("0Gi", "0"),
    (1000000000, "1G"), ("1000", "1k"), ("1500", "1500"), ("0.5", "500m"), ("1.5", "1500m"), ("0.1", "100m"),
    ("20Gi", "20Gi"), ("1024Mi", "1Gi"), ("2048Mi", "2Gi"), ("1536Mi", "1536Mi"), ("1.5Gi", "1536Mi"),
    ("1000000000Gi", "1000000000Gi"), ("512Ki", "512Ki"), ("1Ki", "1Ki"), ("100Mi", "100Mi"),
    ("1e9", "1e9"), ("1e3", "1e3"), ("1M", "1M"), ("1000k", "1M"), ("500m", "500m"),
]


@pytest.mark.parametrize(("value", "canonical"), CANONICAL)
def test_canonical_form(value: object, canonical: str) -> None:
    assert canonical_quantity(value) == canonical
    assert parse_quantity(canonical) == parse_quantity(value)  # the same amount, only written differently


@pytest.mark.parametrize("value", ["20Gi", 16, "1e9", "1000000000Gi", "500m", 1000000000])
def test_canonical_form_is_a_fixed_point(value: object) -> None:
    once = canonical_quantity(value)
    assert canonical_quantity(once) == once


@pytest.mark.parametrize(("value", "amount"), [(16, 16), ("20Gi", 20 * 2**30), ("500m", Decimal("0.5")),
                                               ("1e9", 10**9), ("2k", 2000)])
def test_parse(value: object, amount: Decimal | int) -> None:
    assert parse_quantity(value) == amount


@pytest.mark.parametrize("value", ["", "ten", "1GB", "1.2.3", True, None, 1.5])
def test_parse_refuses_what_kubernetes_refuses(value: object) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(value)
