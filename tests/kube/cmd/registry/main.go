// The CNCF distribution registry as its own cmd/registry builds it, with
// the filesystem storage driver and htpasswd auth only: the tests need no
// cloud storage, and leaving the Azure, GCS and S3 drivers out spares a
// cold build their SDKs. The registry itself is the upstream code.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// RootCmd reports its own errors and exits non-zero on them.
	_ = registry.RootCmd.Execute()
}
