// Package helm_test checks the NeuroNetes Helm chart without a cluster: CRDs in sync with
// deploy/crds, helm lint, renders with several value sets, refusal of unsafe combinations, schema
// validation and least-privilege RBAC. The e2e test TestDeployChart* validates the same renders
// against the real apiserver by server-side dry run.
package helm_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// valueSet is one way of installing the chart.
type valueSet struct {
	name  string
	files []string // relative to deploy/helm
	set   []string // --set-json key=json
	extra []string // other helm template flags
}

// valueSets are rendered, linted and (in e2e) dry-run applied.
var valueSets = []valueSet{
	{name: "default"},
	{name: "mock-nvml-local", files: []string{"values/local.yaml"}},
	{name: "no-webhook", files: []string{"values/local.yaml"}, set: []string{`webhook={"enabled":false}`}},
	{name: "kind", files: []string{"values/kind.yaml"}},
	{name: "helm-tls", set: []string{`webhook={"tls":{"mode":"helm"}}`}},
	{name: "production", files: []string{"values/production-example.yaml"}},
	{name: "controller-only", set: []string{`driver={"enabled":false}`, `nodeagent={"enabled":false}`}},
	{name: "scale-webhook", set: []string{`autoscaler={"scaleWebhook":{"enabled":true,"tokenSecret":"scale-token"}}`}},
	{name: "scheduler", files: []string{"values/local.yaml"}, set: []string{`scheduler={"enabled":true}`}},
	{name: "checkpoint-s3", set: []string{`nodeagent={"checkpoint":{"enabled":true,"s3":{"endpoint":"10.88.0.1:9000","credentialsSecret":"s3"}}}`}},
}

// TestChartCopiesMatchSources fails when the chart's copies of deploy/crds (controller-gen output)
// or deploy/deviceclasses (the driver's) drift from their sources.
func TestChartCopiesMatchSources(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"deploy/crds", "deploy/helm/neuronetes/crds"},
		{"deploy/deviceclasses", "deploy/helm/neuronetes/files/deviceclasses"},
		{"deploy/deviceclasses/compat", "deploy/helm/neuronetes/files/deviceclasses/compat"},
	} {
		root := repoRoot(t)
		src, err := filepath.Glob(filepath.Join(root, tc.src, "*.yaml"))
		if err != nil || len(src) == 0 {
			t.Fatalf("no files in %s: %v", tc.src, err)
		}
		dst, _ := filepath.Glob(filepath.Join(root, tc.dst, "*.yaml"))
		if len(dst) != len(src) {
			t.Errorf("%s has %d files, %s has %d: run `bash hack/deploy-local.sh --sync-crds`", tc.dst, len(dst), tc.src, len(src))
		}
		for _, s := range src {
			want, err := os.ReadFile(s)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, tc.dst, filepath.Base(s)))
			if err != nil {
				t.Errorf("%s: %v (run `bash hack/deploy-local.sh --sync-crds`)", filepath.Base(s), err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s differs from %s: run `bash hack/deploy-local.sh --sync-crds`", tc.dst, filepath.Base(s), tc.src)
			}
		}
	}
}

func TestChartLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir(t), "--namespace", "neuronetes-system"}, valueArgs(t, vs.files, vs.set)...)
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// mockSet reports whether the value set of that name runs the driver with mock NVML.
func mockSet(name string) bool {
	return name == "mock-nvml-local" || name == "no-webhook" || name == "kind" || name == "scheduler"
}

func TestChartRender(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs, err := render(t, vs.files, vs.set, vs.extra...)
			if err != nil {
				t.Fatal(err)
			}
			ds, agent := find(objs, "DaemonSet", "nn-neuronetes-driver"), find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			dep := find(objs, "Deployment", "nn-neuronetes-controller")
			if dep == nil {
				t.Fatal("no controller Deployment")
			}
			ctrl := args(container(dep, "controller"))
			webhookOn := vs.name != "no-webhook"
			if got := contains(ctrl, "--webhook="+map[bool]string{true: "true", false: "false"}[webhookOn]); !got {
				t.Errorf("controller args %v: want --webhook=%v", ctrl, webhookOn)
			}
			hasSvcFlag := false
			for _, a := range ctrl {
				if strings.HasPrefix(a, "--webhook-service=") {
					hasSvcFlag = true
					if a != "--webhook-service=neuronetes-system/nn-neuronetes-controller" {
						t.Errorf("controller %s does not name the chart's Service", a)
					}
				}
			}
			if hasSvcFlag != webhookOn {
				t.Errorf("--webhook-service present=%v, want %v", hasSvcFlag, webhookOn)
			}
			// The release owns the configuration the controller keeps (same name), so uninstall removes it.
			mwc := find(objs, "MutatingWebhookConfiguration", "neuronetes-sidecar-injector")
			if (mwc != nil) != webhookOn || (webhookOn && !contains(ctrl, "--webhook-config-name=neuronetes-sidecar-injector")) {
				t.Errorf("MutatingWebhookConfiguration rendered=%v, webhook=%v, controller args %v", mwc != nil, webhookOn, ctrl)
			}
			if vs.name == "controller-only" {
				if ds != nil || agent != nil {
					t.Error("node DaemonSet rendered with driver and nodeagent disabled")
				}
				return
			}
			if ds == nil || agent == nil {
				t.Fatal("no driver or node agent DaemonSet")
			}
			drv := container(ds, "driver")
			if drv == nil || container(agent, "nodeagent") == nil {
				t.Fatal("the driver or node agent DaemonSet lacks its container")
			}
			// One binary per pod and account: the driver's pod never holds the node agent (nor shares
			// its process namespace), each runs as its own ServiceAccount.
			for _, w := range []struct {
				ds        object
				container string
				sa        string
			}{{ds, "driver", "nn-neuronetes-driver"}, {agent, "nodeagent", "nn-neuronetes-nodeagent"}} {
				if cs := get(w.ds, "spec", "template", "spec", "containers").([]any); len(cs) != 1 || container(w.ds, w.container) == nil {
					t.Errorf("DaemonSet %s: containers %v, want %s alone", w.ds.name(), cs, w.container)
				}
				if sa := get(w.ds, "spec", "template", "spec", "serviceAccountName"); sa != w.sa {
					t.Errorf("DaemonSet %s runs as %v, want %s", w.ds.name(), sa, w.sa)
				}
			}
			if spn, _ := get(ds, "spec", "template", "spec", "shareProcessNamespace").(bool); spn != !mockSet(vs.name) {
				t.Errorf("driver shareProcessNamespace=%v; want it only with real NVML (MPS daemons)", spn)
			}
			if spn := get(agent, "spec", "template", "spec", "shareProcessNamespace"); spn != nil {
				t.Errorf("node agent shareProcessNamespace=%v; want none", spn)
			}
			mock := mockSet(vs.name)
			wantNVML := "--nvml=real"
			if mock {
				wantNVML = "--nvml=mock:dgxa100"
			}
			if !contains(args(drv), wantNVML) {
				t.Errorf("driver args %v: want %s", args(drv), wantNVML)
			}
			if priv, _ := get(drv, "securityContext", "privileged").(bool); priv == mock {
				t.Errorf("driver privileged=%v with nvml mock=%v: privileged only for real NVML", priv, mock)
			}
			// Every set, the local cluster's included, reaches the apiserver the standard way: pods on
			// the pod network with in-cluster config (the kubernetes Service), no override.
			for _, w := range []object{dep, ds, agent} {
				if hn, _ := get(w, "spec", "template", "spec", "hostNetwork").(bool); hn {
					t.Errorf("%s %s runs on the host network", w.kind(), get(w, "metadata", "name"))
				}
				for _, c := range get(w, "spec", "template", "spec", "containers").([]any) {
					env, _ := c.(map[string]any)["env"].([]any)
					for _, e := range env {
						if n := e.(map[string]any)["name"]; n == "KUBERNETES_SERVICE_HOST" || n == "KUBERNETES_SERVICE_PORT" {
							t.Errorf("%s container %s overrides %s", w.kind(), c.(map[string]any)["name"], n)
						}
					}
				}
			}
			for _, w := range []object{ds, agent} { // node.* schedules both
				if sel, _ := get(w, "spec", "template", "spec", "nodeSelector").(map[string]any); (sel["nvidia.com/gpu.present"] == "true") == mock {
					t.Errorf("%s nodeSelector %v: GPU label expected only for real-GPU sets", w.name(), sel)
				}
			}
			if vs.name == "helm-tls" {
				sec := find(objs, "Secret", "nn-neuronetes-webhook-tls")
				if sec == nil {
					t.Fatal("helm TLS mode rendered no Secret")
				}
				for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
					if s, _ := get(sec, "data", k).(string); s == "" {
						t.Errorf("webhook Secret lacks %s", k)
					}
				}
				if get(dep, "spec", "template", "spec", "volumes", 0, "secret", "secretName") != "nn-neuronetes-webhook-tls" {
					t.Error("controller does not mount the generated webhook Secret")
				}
			}
			// values/local.yaml turns the node agent's checkpointing on (the local cluster's runc
			// shim reaches CRIU).
			wantCk := vs.name == "checkpoint-s3" || contains(vs.files, "values/local.yaml")
			if ck := contains(args(container(agent, "nodeagent")), "--checkpoint-enabled=true"); ck != wantCk {
				t.Errorf("nodeagent --checkpoint-enabled present=%v in set %s", ck, vs.name)
			}
			wantProbe := "--sidecar-probe-command=/sidecar probe http://127.0.0.1:7070/healthz"
			if vs.name == "kind" {
				wantProbe = "--sidecar-probe-command=/usr/local/bin/app probe http://127.0.0.1:7070/healthz"
			}
			if webhookOn := vs.name != "no-webhook"; contains(ctrl, wantProbe) != webhookOn {
				t.Errorf("controller args %v: want %s (webhook on: %v)", ctrl, wantProbe, webhookOn)
			}
			// tls.mode=controller (the default; production-example uses its own Secret): every replica
			// shares the pair of one Secret.
			shared := vs.name != "helm-tls" && vs.name != "no-webhook" && vs.name != "production"
			if cs := contains(ctrl, "--webhook-cert-secret=neuronetes-system/nn-neuronetes-webhook-tls"); cs != shared {
				t.Errorf("--webhook-cert-secret present=%v in set %s, want %v (args %v)", cs, vs.name, shared, ctrl)
			}
			if r := find(objs, "Role", "nn-neuronetes-controller-webhook-tls"); (r != nil) != shared {
				t.Errorf("webhook TLS Role rendered=%v in set %s, want %v", r != nil, vs.name, shared)
			}
			if sw := contains(ctrl, "--scale-webhook-tokens-file=/etc/neuronetes/scale-webhook/tokens"); sw != (vs.name == "scale-webhook") {
				t.Errorf("scale webhook token flag present=%v in set %s", sw, vs.name)
			}
			if vs.name == "production" && find(objs, "ServiceMonitor", "nn-neuronetes-controller") == nil {
				t.Error("production example enables ServiceMonitors, none rendered")
			}
			crds := 0
			for _, o := range objs {
				if o.kind() == "CustomResourceDefinition" {
					crds++
				}
			}
			if src, _ := filepath.Glob("../crds/*.yaml"); crds != len(src) || crds == 0 {
				t.Errorf("rendered %d CRDs, deploy/crds has %d", crds, len(src))
			}
			if got, want := countKind(objs, "DeviceClass"), sourceDeviceClasses(t); got != want || want == 0 {
				t.Errorf("rendered %d DeviceClasses, deploy/deviceclasses has %d", got, want)
			}
			if dc := find(objs, "DeviceClass", "gpu.neuronetes.io"); get(dc, "metadata", "labels", "app.kubernetes.io/instance") != "nn" {
				t.Errorf("DeviceClass gpu.neuronetes.io lacks the release labels: %v", get(dc, "metadata"))
			}
		})
	}
}

func TestChartRefusesUnsafeCombinations(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		set   []string
		want  string
	}{
		{"webhook secret mode without secret", nil, []string{`webhook={"tls":{"mode":"secret"}}`}, "webhook.tls.secretName"},
		{"webhook without redis", nil, []string{`redis={"bundled":{"enabled":false},"address":""}`}, "redis.address"},
		{"TLS to the bundled redis", nil, []string{`redis.tls={"enabled":true}`}, "the bundled Redis serves no TLS"},
		{"own redis user on the bundled redis", nil, []string{`gateway.redis.passwordSecret={"name":"gw"}`}, "gateway.redis.passwordSecret.name=gw"},
		{"controller user on the bundled redis", nil, []string{`controller.redis.passwordSecret={"name":"c"}`}, "controller.redis.passwordSecret.name=c"},
		{"glob in a bundled redis prefix", nil, []string{`dispatcher.redis.prefix="nn:*"`}, "dispatcher.redis.prefix"},
		{"mock NVML in production", []string{"values/production-example.yaml"}, []string{`driver={"nvml":"mock:dgxh100"}`}, "refused with profile=production"},
		{"bundled redis without persistence in production", []string{"values/production-example.yaml"}, []string{`redis={"bundled":{"enabled":true,"persistence":{"enabled":false}}}`}, "redis.bundled.persistence.enabled=false"},
		{"pull policy Never in production", []string{"values/production-example.yaml"}, []string{`image={"pullPolicy":"Never"}`}, "image.pullPolicy=Never"},
		// The local cluster's former shortcuts are gone: pods reach the apiserver through the kubernetes Service.
		{"apiserver override is no value", nil, []string{`apiServerOverride={"host":"127.0.0.1","port":"6443"}`}, "apiServerOverride"},
		{"controller host network is no value", nil, []string{`controller={"hostNetwork":true}`}, "hostNetwork"},
		{"node host network is no value", nil, []string{`node={"hostNetwork":true}`}, "hostNetwork"},
		{"webhook without controller", nil, []string{`controller={"enabled":false}`}, "controller.enabled=true"},
		{"two controllers without leader election", nil, []string{`controller={"replicas":2,"leaderElect":false}`}, "controller.leaderElect=true"},
		{"servicemonitor without CRD", nil, []string{`monitoring={"serviceMonitor":{"enabled":true}}`}, "monitoring.coreos.com/v1"},
		{"scale webhook without token", nil, []string{`autoscaler={"scaleWebhook":{"enabled":true}}`}, "autoscaler.scaleWebhook.tokenSecret"},
		{"scale webhook without the webhook's TLS", nil, []string{`autoscaler={"scaleWebhook":{"enabled":true,"tokenSecret":"t"}}`, "webhook.enabled=false"}, "needs webhook.enabled=true"},
		// values.schema.json
		{"unknown NVML backend", nil, []string{`driver={"nvml":"mock:nope"}`}, "nvml"},
		{"bad pull policy", nil, []string{`image={"pullPolicy":"Sometimes"}`}, "pullPolicy"},
		{"unknown top-level key", nil, []string{`webhok={"enabled":false}`}, "webhok"},
		{"bad MIG mode", nil, []string{`driver={"migMode":"auto"}`}, "migMode"},
		{"bad redis address", nil, []string{`redis={"address":"redis"}`}, "address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.files, tc.set)
			if err == nil {
				t.Fatalf("rendered; want a failure naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error does not name %q:\n%v", tc.want, err)
			}
		})
	}
}

func TestChartRBACHasNoWildcards(t *testing.T) {
	// Everything on: webhook, driver, node agent, leader election, bundled Redis, ServiceMonitors.
	objs, err := render(t, nil, []string{`monitoring={"serviceMonitor":{"enabled":true,"skipCapabilityCheck":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	roles := 0
	for _, o := range objs {
		if o.kind() != "ClusterRole" && o.kind() != "Role" {
			continue
		}
		roles++
		rules, _ := o["rules"].([]any)
		if len(rules) == 0 {
			t.Errorf("%s %s has no rules", o.kind(), o.name())
		}
		for i, r := range rules {
			for _, field := range []string{"apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"} {
				l, _ := get(r, field).([]any)
				for _, v := range l {
					if s := v.(string); strings.Contains(s, "*") {
						t.Errorf("%s %s rule %d: %s contains wildcard %q", o.kind(), o.name(), i, field, s)
					}
				}
			}
			for _, v := range get(r, "verbs").([]any) {
				if v == "escalate" || v == "bind" || v == "impersonate" {
					t.Errorf("%s %s rule %d: privilege verb %q", o.kind(), o.name(), i, v)
				}
			}
		}
	}
	if roles < 3 {
		t.Errorf("rendered %d roles, want the controller, leader-election and node roles", roles)
	}
}

// TestChartNodeMetricsServiceTargetsNamedPorts: the node pods' metrics Service selects both node
// DaemonSets (component=node), so each of its ports targets a port name that exactly one of them
// declares; a number would list the other pod for that port too.
func TestChartNodeMetricsServiceTargetsNamedPorts(t *testing.T) {
	objs, err := render(t, nil, []string{`monitoring={"serviceMonitor":{"enabled":true,"skipCapabilityCheck":true}}`})
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string][]string{} // port name -> DaemonSets declaring it
	for _, ds := range []string{"nn-neuronetes-driver", "nn-neuronetes-nodeagent"} {
		for _, c := range get(find(objs, "DaemonSet", ds), "spec", "template", "spec", "containers").([]any) {
			ports, _ := get(c, "ports").([]any)
			for _, p := range ports {
				n, _ := get(p, "name").(string)
				declared[n] = append(declared[n], ds)
			}
		}
	}
	svc := find(objs, "Service", "nn-neuronetes-node-metrics")
	ports, _ := get(svc, "spec", "ports").([]any)
	if len(ports) != 2 {
		t.Fatalf("node metrics Service ports %v, want driver-metrics and agent-metrics", ports)
	}
	for _, p := range ports {
		tp, ok := get(p, "targetPort").(string)
		if !ok || len(declared[tp]) != 1 {
			t.Errorf("node metrics Service port %v: targetPort %v is declared by %v, want a name of exactly one DaemonSet", get(p, "name"), get(p, "targetPort"), declared[tp])
		}
	}
}

func countKind(objs []object, kind string) int {
	n := 0
	for _, o := range objs {
		if o.kind() == kind {
			n++
		}
	}
	return n
}

// sourceDeviceClasses counts the DeviceClass documents of deploy/deviceclasses.
func sourceDeviceClasses(t *testing.T) int {
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "deviceclasses", "*.yaml"))
	n := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := splitObjects(string(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		n += countKind(objs, "DeviceClass")
	}
	return n
}
