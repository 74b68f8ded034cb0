package helm_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The standard ways of changing one value of an installed release (`helm upgrade --reuse-values
// --set`, `--reset-then-reuse-values --set`, `-f <the install's file> --set`) run here against the
// releases the project installs, without a cluster: helm's memory storage driver holds the release
// (HELM_MEMORY_DRIVER_DATA, which also swaps in a printing kube client) and a fake apiserver answers
// the discovery calls helm makes for .Capabilities. The upgrade is a client-side dry run, so it
// renders, validates against values.schema.json and runs templates/validate.yaml as a real upgrade
// does.

// installedRelease is one release the project installs.
type installedRelease struct {
	name  string
	files []string // relative to deploy/helm
	set   []string // --set key=value, as the installer passes them
}

var installedReleases = []installedRelease{
	// hack/deploy-local.sh (make run).
	{name: "local", files: []string{"values/local.yaml"}, set: []string{"redis.address=redis.neuronetes-system.svc.cluster.local:6379"}},
	// deploy/kind/create-cluster.sh.
	{name: "kind", files: []string{"values/kind.yaml"}, set: []string{"driver.nvml=mock:dgxa100"}},
	{name: "production-example", files: []string{"values/production-example.yaml"}},
}

func TestChartUpgradePaths(t *testing.T) {
	for _, rel := range installedReleases {
		paths := []struct {
			name string
			args []string
		}{
			{"reuse-values", []string{"--reuse-values"}},
			{"reset-then-reuse-values", []string{"--reset-then-reuse-values"}},
			{"values file and set", fileArgs(t, rel.files)},
		}
		for _, p := range paths {
			t.Run(rel.name+"/"+p.name, func(t *testing.T) {
				h := newMemoryHelm(t)
				h.install(t, rel)
				manifest := h.upgrade(t, append(p.args, "--set", "driver.compat=true")...)
				objs, err := splitObjects(manifest)
				if err != nil {
					t.Fatal(err)
				}
				ds := find(objs, "DaemonSet", "nn-neuronetes-driver")
				if ds == nil || find(objs, "DaemonSet", "nn-neuronetes-nodeagent") == nil {
					t.Fatal("upgrade rendered no driver or node agent DaemonSet")
				}
				if !contains(args(container(ds, "driver")), "--compat") {
					t.Errorf("driver args %v: the --set driver.compat=true of the upgrade was lost", args(container(ds, "driver")))
				}
				// The values of the install are kept: the local and kind releases still drop the
				// default GPU label selector.
				sel, _ := get(ds, "spec", "template", "spec", "nodeSelector").(map[string]any)
				if _, gpu := sel["nvidia.com/gpu.present"]; gpu != (rel.name == "production-example") {
					t.Errorf("nodeSelector %v after the upgrade: the install's selector was not kept", sel)
				}
			})
		}
	}
}

func fileArgs(t *testing.T, files []string) []string {
	var out []string
	for _, f := range files {
		out = append(out, "-f", filepath.Join(repoRoot(t), "deploy", "helm", f))
	}
	return out
}

// memoryHelm runs helm with the memory storage driver against a fake apiserver.
type memoryHelm struct {
	env   []string
	store string // HELM_MEMORY_DRIVER_DATA file
}

func newMemoryHelm(t *testing.T) *memoryHelm {
	t.Helper()
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(fakeDiscovery))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(dir, "releases.json")
	if err := os.WriteFile(store, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &memoryHelm{store: store, env: append(os.Environ(),
		"HELM_DRIVER=memory", "HELM_MEMORY_DRIVER_DATA="+store, "KUBECONFIG="+kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"))}
}

// fakeDiscovery answers helm's discovery requests: the server version and the core group only.
func fakeDiscovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/version":
		fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.0"}`)
	case "/api":
		fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}`)
	case "/apis":
		fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	case "/api/v1":
		fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[]}`)
	default:
		http.NotFound(w, r)
	}
}

func (h *memoryHelm) run(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = h.env
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// install records the release as `helm install` would leave it (status deployed, the user's values
// in config) in the memory driver's data file.
func (h *memoryHelm) install(t *testing.T, rel installedRelease) {
	t.Helper()
	a := []string{"install", "nn", chartDir(t), "-n", "neuronetes-system", "--dry-run=client", "-o", "json"}
	a = append(a, fileArgs(t, rel.files)...)
	for _, s := range rel.set {
		a = append(a, "--set", s)
	}
	var r map[string]any
	if err := json.Unmarshal(h.run(t, a...), &r); err != nil {
		t.Fatalf("install output: %v", err)
	}
	info, _ := r["info"].(map[string]any)
	if info == nil {
		t.Fatalf("install output has no info: %v", r["name"])
	}
	info["status"] = "deployed"
	raw, err := json.Marshal([]any{r})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.store, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// upgrade runs a client-side dry-run upgrade of the stored release and returns its manifest.
func (h *memoryHelm) upgrade(t *testing.T, args ...string) string {
	t.Helper()
	a := append([]string{"upgrade", "nn", chartDir(t), "-n", "neuronetes-system", "--dry-run=client", "-o", "json"}, args...)
	var r struct {
		Manifest string `json:"manifest"`
	}
	if err := json.Unmarshal(h.run(t, a...), &r); err != nil {
		t.Fatalf("upgrade output: %v", err)
	}
	return r.Manifest
}
