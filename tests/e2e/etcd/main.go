// Command etcd is a thin wrapper around the real etcd server entry point
// (go.etcd.io/etcd/server/v3/etcdmain), identical to etcd's own server/main.go.
// etcd's server module cannot be built with `go install module@version`
// because its go.mod carries replace directives, so this module pins it
// instead. Built by tests/e2e/build_components.sh; used only by the
// end-to-end tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
