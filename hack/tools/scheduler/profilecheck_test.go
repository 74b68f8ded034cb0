package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckProfile: a plugin name that neither NeuroNetes nor kube-scheduler registers fails
// naming the field that holds it, at every place a profile names plugins; the shipped profile, an
// in-tree plugin and disabling "*" pass.
func TestCheckProfile(t *testing.T) {
	all, ours, err := registry(plugins())
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile("../../../deploy/scheduler/neuronetes-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cfg, wantErr string }{
		{"shipped", string(shipped), ""},
		{"in-tree and disabled all", `profiles:
- schedulerName: neuronetes
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit}, {name: NeuroNetesCost}]
  pluginConfig: [{name: NodeResourcesFit}]`, ""},
		{"unknown scorer in multiPoint", `profiles:
- schedulerName: neuronetes
  plugins:
    multiPoint:
      enabled: [{name: NeuroNetesCost, weight: 3}, {name: NeuroNetesSLOHeadroom, weight: 1}]`,
			`profiles[0].plugins.multiPoint.enabled[1].name: unknown plugin "NeuroNetesSLOHeadroom"`},
		{"unknown scorer in a second profile's score", `profiles:
- schedulerName: a
- schedulerName: b
  plugins:
    score:
      enabled: [{name: Cost}]`, `profiles[1].plugins.score.enabled[0].name: unknown plugin "Cost"`},
		{"unknown disabled", `profiles:
- plugins:
    filter:
      disabled: [{name: NodeAfinity}]`, `profiles[0].plugins.filter.disabled[0].name: unknown plugin "NodeAfinity"`},
		{"unknown plugin config", `profiles:
- pluginConfig: [{name: NeuroNetesCost}, {name: NeuroNetesHedroom, args: {}}]`,
			`profiles[0].pluginConfig[1].name: unknown plugin "NeuroNetesHedroom"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkProfile([]byte(tc.cfg), all, ours)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("checkProfile: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("checkProfile error %v, want one containing %s", err, tc.wantErr)
			case err != nil && !strings.Contains(err.Error(), strings.Join(ours, ", ")):
				t.Errorf("error %v does not list NeuroNetes' plugins", err)
			}
		})
	}
}

// TestCommandRefusesUnknownScorer: the neuronetes-scheduler command fails on a --config naming an
// unknown scorer before kube-scheduler starts, with the field.
func TestCommandRefusesUnknownScorer(t *testing.T) {
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: neuronetes
  plugins:
    multiPoint:
      enabled: [{name: NeuroNetesCost}, {name: NeuroNetesModelCache}, {name: NeuroNetesSLOHeadroom}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command()
	cmd.SetArgs([]string{"--config=" + f})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `profiles[0].plugins.multiPoint.enabled[2].name: unknown plugin "NeuroNetesSLOHeadroom"`) {
		t.Fatalf("Execute: %v, want the field of the unknown scorer", err)
	}
	t.Logf("error: %v", err)
}
