// Command kube-controller-manager is a thin wrapper around the real Kubernetes
// controller manager (k8s.io/kubernetes/cmd/kube-controller-manager/app), so
// that it can be built with plain Go module tooling from the Go module proxy.
// It mirrors k8s.io/kubernetes/cmd/kube-controller-manager/controller-manager.go
// of the version pinned in ../../go.mod (the same module, and so the same
// k8s.io/kubernetes version, as the kube-apiserver wrapper one level up).
//
// Built by tests/e2e/build_components.sh; used only by the end-to-end tests.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob Time Zone support

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugin
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
