// Command etcd is upstream etcd's server main, at the go.etcd.io/etcd release
// that k8s.io/kubernetes pins in go.mod. The test control plane stores its
// own state in it; the members run the releases tests/etcd pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
