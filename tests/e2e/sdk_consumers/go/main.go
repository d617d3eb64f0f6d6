// A Go program on the tpu-fallback component package, through the SDK that `pulumi package gen-sdk provider
// --language go` generates. tests/e2e/test_component_sdks_e2e.py generates the SDK and compiles this against it
// (go.mod points the SDK's import path at it), so a generated type that no longer fits these arguments, or an
// output of another type than this program exports, fails the test. The program is compiled, not run.
package main

import (
	tpufallback "example.com/pulumi-tpu-fallback/sdk/go/tpu-fallback"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		// Kueue, the fallback and the queues on a cluster made elsewhere (Pulumi.existing.yaml's settings).
		platform, err := tpufallback.NewPlatform(ctx, "platform", &tpufallback.PlatformArgs{
			ClusterName: pulumi.StringRef("platform-gke"),
			Location:    pulumi.StringRef("us-east5-b"),
			ExistingCluster: &tpufallback.ExistingClusterArgs{
				Name:     pulumi.StringRef("platform-gke"),
				Location: pulumi.StringRef("us-east5-b"),
			},
			Kubeconfig: pulumi.ToSecret(pulumi.String("apiVersion: v1\nkind: Config\n")).(pulumi.StringOutput),
			Tpu:        &tpufallback.TpuArgs{Type: pulumi.StringRef("v6e"), Topology: pulumi.StringRef("4x4")},
			OnDemand:   &tpufallback.OnDemandArgs{MaxSlices: pulumi.IntRef(2)},
			FlexStart: &tpufallback.FlexStartArgs{
				MaxSlices:      pulumi.IntRef(4),
				MaxRunDuration: pulumi.StringRef("86400s"),
			},
			Queues: &tpufallback.QueuesArgs{
				LocalQueues:     []tpufallback.LocalQueueArgs{{Namespace: "team-a", Name: "user-queue"}},
				NamespaceLabels: map[string]string{"tpu-fallback/queue": "allowed"},
			},
			Fallback: &tpufallback.FallbackOptionsArgs{StockoutAfter: pulumi.StringRef("10m")},
		})
		if err != nil {
			return err
		}
		var clusterQueue pulumi.StringOutput = platform.ClusterQueue
		var localQueues pulumi.StringMapArrayOutput = platform.LocalQueues
		ctx.Export("clusterQueue", clusterQueue)
		ctx.Export("localQueues", localQueues)

		// MultiKueue: a manager and two workers, each with its own plans.
		multi, err := tpufallback.NewMultiRegionPlatform(ctx, "multi", &tpufallback.MultiRegionPlatformArgs{
			ClusterName: pulumi.StringRef("tpu-global"),
			Manager:     &tpufallback.ManagerArgs{Autopilot: pulumi.BoolRef(true)},
			Workers: []tpufallback.WorkerArgs{
				{Name: "us", Location: "us-east5-b", OnDemand: &tpufallback.OnDemandArgs{MaxSlices: pulumi.IntRef(1)}},
				{Name: "eu", Location: "europe-west4-a", Tpu: &tpufallback.TpuArgs{Type: pulumi.StringRef("v5e")},
					Ladder: []tpufallback.RungArgs{{Kind: "onDemand"}, {Kind: "flexStart", MaxSlices: pulumi.IntRef(2)}}},
			},
		}, pulumi.DependsOn([]pulumi.Resource{platform}))
		if err != nil {
			return err
		}
		var multikueue pulumi.BoolOutput = multi.Multikueue
		ctx.Export("multikueue", multikueue)
		return nil
	})
}
