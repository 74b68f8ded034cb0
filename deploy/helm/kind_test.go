package helm_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKindConfig checks deploy/kind by reading it (kind needs Docker, absent on CI): the DRA gates,
// CDI in containerd with the driver's CDI directory, and a worker label that the install script's
// values (deploy/helm/values/kind.yaml) select.
func TestKindConfig(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "kind", "kind-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Name         string          `json:"name"`
		Kind         string          `json:"kind"`
		APIVersion   string          `json:"apiVersion"`
		FeatureGates map[string]bool `json:"featureGates"`
		Patches      []string        `json:"containerdConfigPatches"`
		Nodes        []struct {
			Role   string            `json:"role"`
			Labels map[string]string `json:"labels"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		t.Fatalf("kind-config.yaml: %v", err)
	}
	if cfg.Kind != "Cluster" || cfg.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Errorf("kind/apiVersion = %s/%s", cfg.Kind, cfg.APIVersion)
	}
	for _, g := range []string{"DRAPartitionableDevices", "DRADeviceTaints"} {
		if !cfg.FeatureGates[g] {
			t.Errorf("featureGates.%s is not true", g)
		}
	}
	patch := strings.Join(cfg.Patches, "\n")
	for _, want := range []string{"enable_cdi = true", `"/var/run/cdi"`, `plugins."io.containerd.cri.v1.runtime"`} {
		if !strings.Contains(patch, want) {
			t.Errorf("containerdConfigPatches lack %s", want)
		}
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "kind", "create-cluster.sh"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render(t, []string{"values/kind.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sel, _ := get(find(objs, "DaemonSet", "nn-neuronetes-driver"), "spec", "template", "spec", "nodeSelector").(map[string]any)
	workers := 0
	for _, n := range cfg.Nodes {
		if n.Role != "worker" {
			continue
		}
		workers++
		for k, v := range sel {
			if n.Labels[k] != v {
				t.Errorf("kind worker labels %v do not satisfy the chart's node selector %v", n.Labels, sel)
			}
		}
	}
	if workers == 0 || len(sel) == 0 {
		t.Errorf("%d kind workers, node selector %v: want a worker that the selector picks", workers, sel)
	}
	for _, want := range []string{"deploy/helm/values/kind.yaml", "kind load docker-image", "deploy/kind/Dockerfile", "--wait"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("create-cluster.sh lacks %q", want)
		}
	}
}
