// A TypeScript program on the tpu-fallback component package, through the SDK that `pulumi package gen-sdk provider
// --language nodejs` generates (package @pulumi/tpu-fallback; tsconfig.json maps the name to the generated
// directory). tests/e2e/test_component_sdks_e2e.py type-checks it with `tsc --noEmit`, so a generated type that no
// longer fits these arguments, or an output of another type than this program exports, fails the test. The
// program is type-checked, not run.
import * as pulumi from "@pulumi/pulumi";
import * as tpufallback from "@pulumi/tpu-fallback";

// Kueue, the fallback and the queues on a cluster made elsewhere (Pulumi.existing.yaml's settings).
const platform = new tpufallback.Platform("platform", {
    clusterName: "platform-gke",
    location: "us-east5-b",
    existingCluster: { name: "platform-gke", location: "us-east5-b" },
    kubeconfig: pulumi.secret("apiVersion: v1\nkind: Config\n"),
    tpu: { type: "v6e", topology: "4x4" },
    onDemand: { maxSlices: 2 },
    flexStart: { maxSlices: 4, maxRunDuration: "86400s" },
    queues: {
        localQueues: [{ namespace: "team-a", name: "user-queue" }],
        namespaceLabels: { "tpu-fallback/queue": "allowed" },
    },
    fallback: { stockoutAfter: "10m" },
});

// MultiKueue: a manager and two workers, each with its own plans.
const multi = new tpufallback.MultiRegionPlatform("multi", {
    clusterName: "tpu-global",
    manager: { autopilot: true },
    workers: [
        { name: "us", location: "us-east5-b", onDemand: { maxSlices: 1 } },
        {
            name: "eu", location: "europe-west4-a", tpu: { type: "v5e" },
            ladder: [{ kind: "onDemand" }, { kind: "flexStart", maxSlices: 2 }],
        },
    ],
}, { dependsOn: [platform] });

export const clusterQueue: pulumi.Output<string> = platform.clusterQueue;
export const localQueues: pulumi.Output<{ [key: string]: string }[]> = platform.localQueues;
export const multikueue: pulumi.Output<boolean> = multi.multikueue;
