// Command kube-scheduler is a thin wrapper around the real Kubernetes
// scheduler (k8s.io/kubernetes/cmd/kube-scheduler/app), so that it can be
// built with plain Go module tooling from the Go module proxy. It mirrors
// k8s.io/kubernetes/cmd/kube-scheduler/scheduler.go of the version pinned in
// ../../go.mod (the same module, and so the same k8s.io/kubernetes version,
// as the kube-apiserver wrapper one level up).
//
// Built by tests/e2e/build_components.sh; used only by the end-to-end tests.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	command := app.NewSchedulerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
