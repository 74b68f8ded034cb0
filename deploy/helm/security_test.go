package helm_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// podSpec decodes the pod template of a rendered workload.
func podSpec(t *testing.T, o object) corev1.PodSpec {
	t.Helper()
	raw, err := json.Marshal(get(o, "spec", "template", "spec"))
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("%s %s pod template: %v", o.kind(), o.name(), err)
	}
	return spec
}

// TestChartWorkloadsMeetRestricted: in every value set, the gateway, controller, dispatcher and
// bundled Redis pods pass Pod Security "restricted" and run with a read-only root filesystem;
// Redis, which calls no API, mounts no service account token.
func TestChartWorkloadsMeetRestricted(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	restricted := psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}
	sets := append([]valueSet{{name: "dispatcher-and-bundled-redis", set: []string{`dispatcher.enabled=true`}}}, valueSets...)
	for _, vs := range sets {
		t.Run(vs.name, func(t *testing.T) {
			objs, err := render(t, vs.files, vs.set, vs.extra...)
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, o := range objs {
				if o.kind() != "Deployment" && o.kind() != "StatefulSet" {
					continue
				}
				seen++
				spec := podSpec(t, o)
				meta := metav1.ObjectMeta{Name: o.name()}
				if res := policy.AggregateCheckResults(eval.EvaluatePod(restricted, &meta, &spec)); !res.Allowed {
					t.Errorf("%s %s violates restricted: %s", o.kind(), o.name(), res.ForbiddenDetail())
				}
				for _, c := range append(spec.InitContainers, spec.Containers...) {
					if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
						t.Errorf("%s %s container %s: root filesystem not read-only", o.kind(), o.name(), c.Name)
					}
				}
				if strings.HasSuffix(o.name(), "-redis") && (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
					t.Errorf("Redis mounts a service account token")
				}
			}
			if seen == 0 {
				t.Fatal("no Deployment or StatefulSet rendered")
			}
		})
	}
}

// TestChartNodePrivileges: the node DaemonSets' containers are privileged only for the feature that
// needs it: the driver for real NVML, the node agent for CRIU checkpoints (or when forced). Mlock
// alone adds CAP_IPC_LOCK to an otherwise capability-less node agent.
func TestChartNodePrivileges(t *testing.T) {
	cases := []struct {
		name              string
		set               []string
		driver, nodeagent bool
		agentCaps         string // the node agent's capabilities.add when unprivileged
	}{
		{"real NVML, weights cache only", nil, true, false, "[]"},
		{"mock NVML", []string{`driver.nvml="mock:dgxa100"`}, false, false, "[]"},
		{"checkpoints", []string{`nodeagent.checkpoint.enabled=true`}, true, true, ""},
		{"checkpoints and mlock", []string{`nodeagent.checkpoint.enabled=true`, `nodeagent.mlockBudget="8Gi"`}, true, true, ""},
		{"mlock", []string{`nodeagent.mlockBudget="8Gi"`}, true, false, "[IPC_LOCK]"},
		{"forced", []string{`nodeagent.privileged=true`}, true, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				ds, container string
				want          bool
			}{{"nn-neuronetes-driver", "driver", tc.driver}, {"nn-neuronetes-nodeagent", "nodeagent", tc.nodeagent}} {
				ctr := container(find(objs, "DaemonSet", c.ds), c.container)
				if got, _ := get(ctr, "securityContext", "privileged").(bool); got != c.want {
					t.Errorf("%s privileged = %v, want %v", c.container, got, c.want)
				}
				if !c.want && get(ctr, "securityContext", "allowPrivilegeEscalation") != false {
					t.Errorf("%s unprivileged but may escalate: %v", c.container, get(ctr, "securityContext"))
				}
			}
			if tc.nodeagent {
				return
			}
			sc := get(container(find(objs, "DaemonSet", "nn-neuronetes-nodeagent"), "nodeagent"), "securityContext")
			if d := fmt.Sprint(get(sc, "capabilities", "drop")); d != "[ALL]" {
				t.Errorf("node agent capabilities.drop = %s, want [ALL]", d)
			}
			add := fmt.Sprint(get(sc, "capabilities", "add"))
			if add == "<nil>" {
				add = "[]"
			}
			if add != tc.agentCaps {
				t.Errorf("node agent capabilities.add = %s, want %s", add, tc.agentCaps)
			}
		})
	}
}

// TestChartImageDigests: image.digests pins a component by digest (the sidecar through the
// controller's --sidecar-image, with or without sidecar.repository); the others keep the tag, and a
// malformed digest or unknown component is refused by the schema.
func TestChartImageDigests(t *testing.T) {
	dig := "sha256:" + strings.Repeat("ab", 32)
	objs, err := render(t, nil, []string{`image.digests={"gateway":"` + dig + `","sidecar":"` + dig + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := container(find(objs, "Deployment", "nn-neuronetes-gateway"), "gateway")["image"]; got != "neuronetes.local/gateway@"+dig {
		t.Errorf("gateway image %v, want the digest", got)
	}
	ctrl := container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller")
	if got := ctrl["image"]; got != "neuronetes.local/controller:dev" {
		t.Errorf("controller image %v, want the tag", got)
	}
	if !contains(args(ctrl), "--sidecar-image=neuronetes.local/sidecar@"+dig) {
		t.Errorf("controller args %v: want the sidecar digest", args(ctrl))
	}
	objs, err = render(t, nil, []string{`sidecar.repository="registry.example.com/nn/sidecar"`, `image.digests={"sidecar":"` + dig + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	if !contains(args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller")), "--sidecar-image=registry.example.com/nn/sidecar@"+dig) {
		t.Error("sidecar.repository with a digest does not pin the digest")
	}
	for _, bad := range []string{`image.digests={"gateway":"sha256:abc"}`, `image.digests={"gatway":"` + dig + `"}`, `image.digests={"gateway":"latest"}`} {
		if _, err := render(t, nil, []string{bad}); err == nil || !strings.Contains(err.Error(), "digests") {
			t.Errorf("%s: want a schema error naming image.digests, got %v", bad, err)
		}
	}
}

// TestChartCheckpointNodePaths: with checkpoints the node agent sees the node's PIDs (hostPID: a
// dump reads /proc/<pid>/maps of the container's processes) and mounts its CRIU staging directory
// from the node at the same path (containerd's runc shim writes the dumps there and restores from
// there); without checkpoints it has neither.
func TestChartCheckpointNodePaths(t *testing.T) {
	cases := []struct {
		name    string
		set     []string
		workDir string // "" when checkpoints are off
	}{
		{"off", nil, ""},
		{"default work dir", []string{`nodeagent.checkpoint.enabled=true`}, "/dev/shm/neuronetes-checkpoint"},
		{"own work dir", []string{`nodeagent.checkpoint.enabled=true`, `nodeagent.checkpoint.workDir="/var/lib/nn-work/"`}, "/var/lib/nn-work"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			on := tc.workDir != ""
			if got, _ := get(ds, "spec", "template", "spec", "hostPID").(bool); got != on {
				t.Errorf("hostPID = %v, want %v", got, on)
			}
			ctr := container(ds, "nodeagent")
			if got := contains(args(ctr), "--checkpoint-work-dir="+tc.workDir); got != on {
				t.Errorf("--checkpoint-work-dir=%s present = %v, want %v (args %v)", tc.workDir, got, on, args(ctr))
			}
			mount := ""
			mounts, _ := get(ctr, "volumeMounts").([]any)
			for _, m := range mounts {
				if get(m, "name") == "checkpoint-work" {
					mount = fmt.Sprint(get(m, "mountPath"))
				}
			}
			host := ""
			vols, _ := get(ds, "spec", "template", "spec", "volumes").([]any)
			for _, v := range vols {
				if get(v, "name") == "checkpoint-work" {
					host = fmt.Sprint(get(v, "hostPath", "path"))
				}
			}
			if mount != tc.workDir || host != tc.workDir {
				t.Errorf("checkpoint-work mounted at %q from node path %q, want both %q", mount, host, tc.workDir)
			}
		})
	}
}
