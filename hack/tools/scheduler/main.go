// Command neuronetes-scheduler is kube-scheduler v1.37 (k8s.io/kubernetes, pinned in go.mod) with
// NeuroNetes' Score plugins registered: NeuroNetesCost, NeuroNetesModelCache, NeuroNetesHeadroom,
// NeuroNetesZoneSpread and NeuroNetesNetworkTopology (scoring in
// github.com/neuronetes/neuronetes/scheduler/scoring; NeuroNetesModelCache and
// NeuroNetesNetworkTopology are scoring.CustomSchedulerPlugins, seed 000's extension point, run
// through customPlugin, the first with an AgentCheckpoint informer, the second with the
// scheduler's PodGroup state; NeuroNetesHeadroom reads the gateway's per-pool
// view when its gatewayURLs arg lists the gateway replicas).
// A KubeSchedulerConfiguration profile enables them (deploy/scheduler/neuronetes-scheduler.yaml, profile
// "neuronetes"); pods select it with spec.schedulerName. Flags are kube-scheduler's.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(command()))
}

// command is kube-scheduler's command with the plugins registered; it refuses a --config that
// names an unknown plugin with the field that names it (withProfileCheck).
func command() *cobra.Command {
	return withProfileCheck(app.NewSchedulerCommand(plugins()...), plugins())
}

// plugins registers NeuroNetes' Score plugins in kube-scheduler's out-of-tree registry.
func plugins() []app.Option {
	return []app.Option{
		app.WithPlugin(CostName, newCost),
		app.WithPlugin(ModelCacheName, newModelCache), // scoring.ModelCache through customPlugin
		app.WithPlugin(HeadroomName, newHeadroom),
		app.WithPlugin(ZoneSpreadName, newZoneSpread),
		app.WithPlugin(NetworkTopologyName, newNetworkTopology), // scoring.NetworkTopology through customPlugin
	}
}
