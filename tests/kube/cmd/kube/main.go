// Command kube is a multi-call build of the real Kubernetes control plane and
// kubectl, from the k8s.io/kubernetes module at the release go.mod pins. It
// runs the component named by its own file name (a symlink) or by its first
// argument:
//
//	kube kube-apiserver --etcd-servers=...
//	ln -s kube kube-apiserver && ./kube-apiserver --etcd-servers=...
//
// One binary rather than four: the components share most of their code, and
// on a 2-core machine each extra link of a Kubernetes binary costs minutes.
// The dispatch is the one hyperkube used; each branch is the upstream main.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as upstream's apiserver and controller-manager

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := servers[name]; !ok && name != "kubectl" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	if name == "kubectl" {
		runKubectl()
		return
	}
	newCommand, ok := servers[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|kubectl} [flags]")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}

// runKubectl is upstream's cmd/kubectl main.
func runKubectl() {
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectl.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
}
