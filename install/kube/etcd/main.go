// Command etcd: etcd's own server main, built from the Go module proxy (the etcd repository's
// module replaces its siblings with local paths, so `go install` of it cannot be used).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
