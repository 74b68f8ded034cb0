package helm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// schedulerConfig decodes the KubeSchedulerConfiguration of the scheduler's ConfigMap.
func schedulerConfig(t *testing.T, objs []object) map[string]any {
	t.Helper()
	cm := find(objs, "ConfigMap", "nn-neuronetes-scheduler")
	if cm == nil {
		t.Fatal("no scheduler ConfigMap")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(get(cm, "data", "config.yaml").(string)), &cfg); err != nil {
		t.Fatalf("scheduler config: %v", err)
	}
	return cfg
}

// pluginArgs returns the args of the named plugin in profile 0's pluginConfig, nil if absent.
func pluginArgs(cfg map[string]any, name string) map[string]any {
	for _, pc := range asList(get(cfg, "profiles", 0, "pluginConfig")) {
		if get(pc, "name") == name {
			a, _ := get(pc, "args").(map[string]any)
			return a
		}
	}
	return nil
}

// TestChartScheduler: scheduler.enabled=false (the default) renders nothing of the scheduler;
// enabled, a Deployment runs neuronetes-scheduler under its own ServiceAccount with the shipped
// profile (deploy/scheduler) made in-cluster: leader election on the Lease neuronetes-scheduler of
// the release namespace, scheduler.priceTable as NeuroNetesCost's priceTable, the gateway's
// headless admin Service as NeuroNetesHeadroom's gatewayURLs (none with gatewayHeadroom=false).
func TestChartScheduler(t *testing.T) {
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.Contains(o.name(), "scheduler") {
			t.Errorf("scheduler.enabled=false renders %s %s", o.kind(), o.name())
		}
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "scheduler", "neuronetes-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped map[string]any
	if err := yaml.Unmarshal(raw, &shipped); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		set      []string
		wantURLs []any
	}{
		{"headroom from the gateway", []string{`scheduler={"enabled":true,"priceTable":{"p4d.24xlarge.spot":"12.5"},"featureGates":"GenericWorkload=true"}`},
			[]any{"http://nn-neuronetes-gateway-admin.neuronetes-system.svc:9090"}},
		{"replicas only", []string{`scheduler={"enabled":true,"gatewayHeadroom":false}`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			dep := find(objs, "Deployment", "nn-neuronetes-scheduler")
			if dep == nil {
				t.Fatal("no scheduler Deployment")
			}
			if sa := get(dep, "spec", "template", "spec", "serviceAccountName"); sa != "nn-neuronetes-scheduler" {
				t.Errorf("serviceAccountName %v", sa)
			}
			c := container(dep, "scheduler")
			if img := get(c, "image"); img != "neuronetes.local/neuronetes-scheduler:dev" {
				t.Errorf("image %v", img)
			}
			a := args(c)
			if !contains(a, "--config=/etc/neuronetes/scheduler/config.yaml") || !contains(a, "--secure-port=10259") || !contains(a, "--authentication-skip-lookup=true") {
				t.Errorf("args %v", a)
			}
			if gates := contains(a, "--feature-gates=GenericWorkload=true"); gates != (tc.wantURLs != nil) {
				t.Errorf("args %v: --feature-gates present=%v", a, gates)
			}
			cfg := schedulerConfig(t, objs)
			if le := toJSON(cfg["leaderElection"]); le != `{"leaderElect":true,"resourceName":"neuronetes-scheduler","resourceNamespace":"neuronetes-system"}` {
				t.Errorf("leaderElection %s", le)
			}
			if cc := toJSON(cfg["clientConnection"]); cc != `{"kubeconfig":""}` {
				t.Errorf("clientConnection %s: want in-cluster credentials", cc)
			}
			if got, want := toJSON(get(cfg, "profiles", 0, "plugins")), toJSON(get(shipped, "profiles", 0, "plugins")); got != want {
				t.Errorf("plugins %s, want deploy/scheduler's %s", got, want)
			}
			if get(cfg, "profiles", 0, "schedulerName") != "neuronetes" {
				t.Errorf("profile %v", get(cfg, "profiles", 0, "schedulerName"))
			}
			if tc.wantURLs != nil && toJSON(pluginArgs(cfg, "NeuroNetesCost")) != `{"priceTable":{"p4d.24xlarge.spot":"12.5"}}` {
				t.Errorf("NeuroNetesCost args %s", toJSON(pluginArgs(cfg, "NeuroNetesCost")))
			}
			if got := asList(get(pluginArgs(cfg, "NeuroNetesHeadroom"), "gatewayURLs")); !slices.Equal(got, tc.wantURLs) {
				t.Errorf("NeuroNetesHeadroom gatewayURLs %v, want %v", got, tc.wantURLs)
			}
			// The gateway's admin port admits the scheduler only when it reads it.
			gw := policies(objs)["neuronetes-system/nn-neuronetes-gateway"]
			wantFrom := []string{"neuronetes-system/controller"}
			if tc.wantURLs != nil {
				wantFrom = append(wantFrom, "neuronetes-system/scheduler")
			}
			if got := peerComponents(ruleFor(gw, "admin"), "from"); !slices.Equal(got, wantFrom) {
				t.Errorf("gateway admin port admits %v, want %v", got, wantFrom)
			}
			sp := policies(objs)["neuronetes-system/nn-neuronetes-scheduler"]
			if got := peerComponents(ruleFor(sp, "https"), "from"); !slices.Equal(got, []string{"neuronetes-system/controller"}) {
				t.Errorf("scheduler port admits %v", got)
			}
		})
	}
}

// TestChartSchedulerRBAC: the scheduler's account is bound to system:kube-scheduler and
// system:volume-scheduler and to the chart's own roles, which grant only get, list and watch of
// AgentCheckpoints and get and update of the Lease neuronetes-scheduler in the release namespace
// (none without leader election); nothing of Secrets.
func TestChartSchedulerRBAC(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   string
		lease bool
	}{
		{"leader election", `scheduler={"enabled":true}`, true},
		{"one replica without leader election", `scheduler={"enabled":true,"leaderElection":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, []string{tc.set})
			if err != nil {
				t.Fatal(err)
			}
			const sa = "nn-neuronetes-scheduler"
			var bound []string
			for _, o := range objs {
				if o.kind() != "RoleBinding" && o.kind() != "ClusterRoleBinding" {
					continue
				}
				for _, s := range asList(o["subjects"]) {
					if get(s, "name") == sa {
						bound = append(bound, toJSON(get(o, "roleRef", "kind"))+" "+toJSON(get(o, "roleRef", "name")))
					}
				}
			}
			slices.Sort(bound)
			want := []string{`"ClusterRole" "nn-neuronetes-scheduler"`, `"ClusterRole" "system:kube-scheduler"`, `"ClusterRole" "system:volume-scheduler"`}
			if tc.lease {
				want = append(want, `"Role" "nn-neuronetes-scheduler-leader-election"`)
			}
			if !slices.Equal(bound, want) {
				t.Errorf("scheduler bound to %v, want %v", bound, want)
			}
			if got := toJSON(find(objs, "ClusterRole", sa)["rules"]); got != `[{"apiGroups":["neuronetes.io"],"resources":["agentcheckpoints"],"verbs":["get","list","watch"]}]` {
				t.Errorf("scheduler ClusterRole rules %s", got)
			}
			role := find(objs, "Role", sa+"-leader-election")
			if (role != nil) != tc.lease {
				t.Fatalf("leader-election Role rendered=%v, want %v", role != nil, tc.lease)
			}
			if role != nil {
				if got := toJSON(role["rules"]); got != `[{"apiGroups":["coordination.k8s.io"],"resourceNames":["neuronetes-scheduler"],"resources":["leases"],"verbs":["get","update"]}]` {
					t.Errorf("leader-election rules %s", got)
				}
				if ns := get(role, "metadata", "namespace"); ns != "neuronetes-system" {
					t.Errorf("leader-election Role in %v", ns)
				}
			}
		})
	}
}

// TestChartSchedulerRefusals: more than one replica without leader election is refused naming
// the values; a malformed featureGates is refused by the schema naming the field.
func TestChartSchedulerRefusals(t *testing.T) {
	for _, tc := range []struct{ name, set, want string }{
		{"replicas without leader election", `scheduler={"enabled":true,"replicas":2,"leaderElection":false}`, "scheduler.replicas=2 needs scheduler.leaderElection=true"},
		{"feature gates", `scheduler={"enabled":true,"featureGates":"GenericWorkload"}`, "featureGates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, nil, []string{tc.set})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
