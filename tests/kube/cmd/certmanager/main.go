// Command cert-manager runs cert-manager's own controllers, from its Go
// module, for the tests that issue etcd's certificates through it
// (tests/testbed/src/cert_manager.rs). cert-manager's main package lives in
// a module of its own (github.com/cert-manager/cert-manager/cmd/controller)
// that the Go module proxy does not serve, so this is the part of that main
// which starts the controllers: the Certificate pipeline, the CA and
// SelfSigned issuers, and the approver. ACME, Vault, Venafi, ingress-shim,
// Gateway API and the webhook are left out: no test uses them, and the CRDs
// are applied without the webhook's conversion (v1 only).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers cert-manager's own main enables by default, less those
// of the issuers and features left out above.
var controllers = []string{
	"issuers", "clusterissuers",
	"certificates-trigger", "certificates-key-manager", "certificates-request-manager",
	"certificates-issuing", "certificates-readiness", "certificates-revision-manager",
	"certificaterequests-approver", "certificaterequests-issuer-ca", "certificaterequests-issuer-selfsigned",
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver to watch")
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "namespace of the Secrets ClusterIssuers read")
	flag.Parse()
	if err := run(*kubeconfig, *clusterNS); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, clusterNS string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterNS},
		// cert-manager's defaults (its --copied-annotation-prefixes and
		// --certificate-request-*-backoff-duration flags).
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, name := range controllers {
		newController, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered", name)
		}
		c, err := newController(factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(5, ctx); err != nil {
				fmt.Fprintf(os.Stderr, "cert-manager: controller %s: %v\n", name, err)
			}
		}()
	}
	// The informers are shared by all controllers, and started once they have
	// all registered their handlers, as cert-manager's main does.
	base, err := factory.Build()
	if err != nil {
		return err
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	fmt.Fprintln(os.Stderr, "cert-manager: controllers started")
	wg.Wait()
	return nil
}
