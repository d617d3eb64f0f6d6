// Command kube-apiserver is a thin wrapper around the real Kubernetes API
// server (k8s.io/kubernetes/cmd/kube-apiserver/app), so that it can be built
// with plain Go module tooling from the Go module proxy. It mirrors
// k8s.io/kubernetes/cmd/kube-apiserver/apiserver.go of the pinned version.
//
// Built by tests/e2e/build_components.sh; used only by the end-to-end tests.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
