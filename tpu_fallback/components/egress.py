"""PrivateEgress: a Cloud Router and a Cloud NAT per region for the stack's private nodes (model/egress.py says
when and why), with reserved static addresses where the MultiKueue manager's egress must be authorized."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from tpu_fallback.model.egress import NatGateway


@dataclass(frozen=True)
class PrivateEgressArgs:
    project: str
    gateways: Sequence[NatGateway]
    apis: Sequence[pulumi.Resource] = ()  # compute.googleapis.com among them


class PrivateEgress(pulumi.ComponentResource):
    nats: list[gcp.compute.RouterNat]
    # The static egress addresses as /32 CIDRs (the MultiKueue manager's), for the workers' authorized networks.
    static_cidrs: pulumi.Output[list[str]]

    def __init__(self, name: str, args: PrivateEgressArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:network:PrivateEgress", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.apis))
        self.nats = []
        addresses: list[gcp.compute.Address] = []
        for gateway in args.gateways:
            prefix = f"{name}-{gateway.region}"
            router = gcp.compute.Router(f"{prefix}-router", name=gateway.name, project=args.project,
                                        region=gateway.region, network=gateway.network, opts=child)
            static = [gcp.compute.Address(f"{prefix}-ip-{i + 1}", name=f"{gateway.name[:58]}-ip-{i + 1}",
                                          project=args.project, region=gateway.region, address_type="EXTERNAL",
                                          opts=child)
                      for i in range(gateway.static_addresses)]
            addresses += static
            self.nats.append(gcp.compute.RouterNat(
                f"{prefix}-nat",
                name=gateway.name,
                project=args.project,
                region=gateway.region,
                router=router.name,
                # Reserved addresses keep the manager's source address stable for the workers' authorized networks.
                nat_ip_allocate_option="MANUAL_ONLY" if static else "AUTO_ONLY",
                nat_ips=[a.self_link for a in static] if static else None,
                source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
                log_config={"enable": True, "filter": "ERRORS_ONLY"},
                opts=child,
            ))
        self.static_cidrs = pulumi.Output.all(*(a.address for a in addresses)).apply(
            lambda ips: [f"{ip}/32" for ip in ips])
        self.register_outputs({"regions": [g.region for g in args.gateways]})
