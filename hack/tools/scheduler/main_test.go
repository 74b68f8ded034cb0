package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/yaml"
)

// profile returns the shipped configuration (deploy/scheduler) pointed at an unreachable
// apiserver, with edit applied to its "neuronetes" profile (a map of the YAML).
func profileFile(t *testing.T, edit func(profile map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile("../../../deploy/scheduler/neuronetes-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kc}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	edit(cfg["profiles"].([]any)[0].(map[string]any))
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(f, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProfile builds the scheduler (kube-scheduler's Setup: config decoding, validation, every
// profile's framework) from the shipped profile, and from the profile with a scorer that is not
// registered, which must fail naming it.
func TestProfile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(map[string]any)
		wantErr string
	}{
		{"shipped", func(map[string]any) {}, ""},
		{"unknown scorer", func(p map[string]any) {
			mp := p["plugins"].(map[string]any)["multiPoint"].(map[string]any)
			mp["enabled"] = append(mp["enabled"].([]any), map[string]any{"name": "NeuroNetesSLOHeadroom", "weight": 1})
		}, `"NeuroNetesSLOHeadroom" does not exist`},
		{"bad price table", func(p map[string]any) {
			p["pluginConfig"] = []any{map[string]any{"name": CostName, "args": map[string]any{"priceTable": map[string]any{"p4d.24xlarge.spot": "cheap"}}}}
		}, `NeuroNetesCost args priceTable: price table key "p4d.24xlarge.spot"`},
		{"topology levels", func(p map[string]any) {
			p["pluginConfig"] = []any{map[string]any{"name": NetworkTopologyName, "args": map[string]any{"levels": []any{"b", "r", "kubernetes.io/hostname"}}}}
		}, ""},
		{"topology unknown field", func(p map[string]any) {
			p["pluginConfig"] = []any{map[string]any{"name": NetworkTopologyName, "args": map[string]any{"labels": []any{"b"}}}}
		}, `NeuroNetesNetworkTopology args: json: unknown field "labels"`},
		{"topology empty key", func(p map[string]any) {
			p["pluginConfig"] = []any{map[string]any{"name": NetworkTopologyName, "args": map[string]any{"levels": []any{"b", ""}}}}
		}, `NeuroNetesNetworkTopology args levels[1]: empty label key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := options.NewOptions()
			opts.ConfigFile = profileFile(t, tc.edit)
			opts.SecureServing.BindPort = 0
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, sched, err := app.Setup(ctx, opts, plugins()...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Setup: %v", err)
			case tc.wantErr == "" && len(sched.Profiles) != 1:
				t.Fatalf("profiles %v, want only neuronetes", sched.Profiles)
			case tc.wantErr == "" && sched.Profiles["neuronetes"] == nil:
				t.Fatalf("no profile neuronetes")
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Setup error %v, want one containing %s", err, tc.wantErr)
			}
			if err != nil {
				t.Logf("error: %v", err)
			}
		})
	}
}
