package helm_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// TestChartGateway renders the gateway: Deployment with its replicas, grace period and flags, the
// API and headless admin Services, the PodDisruptionBudget and least-privilege RBAC.
func TestChartGateway(t *testing.T) {
	objs, err := render(t, nil, []string{`gateway={"replicas":3,"watchNamespaces":["agents","chat"],"tls":{"secretName":"gw-tls"},"terminationGracePeriodSeconds":90,"drainDelaySeconds":10}`})
	if err != nil {
		t.Fatal(err)
	}
	dep := find(objs, "Deployment", "nn-neuronetes-gateway")
	if dep == nil {
		t.Fatal("no gateway Deployment")
	}
	if r, _ := get(dep, "spec", "replicas").(float64); r != 3 {
		t.Errorf("replicas %v", get(dep, "spec", "replicas"))
	}
	if g, _ := get(dep, "spec", "template", "spec", "terminationGracePeriodSeconds").(float64); g != 90 {
		t.Errorf("grace %v", g)
	}
	a := args(container(dep, "gateway"))
	if raw, _ := get(container(dep, "gateway"), "args").([]any); len(raw) != len(a) {
		t.Fatalf("gateway args are not all strings: %v", raw)
	}
	for _, want := range []string{"--auth=required", "--namespaces=agents,chat", "--redis-addr=nn-neuronetes-redis.neuronetes-system.svc:6379",
		"--drain-delay=10s", "--shutdown-timeout=75s", "--tls-cert-file=/etc/neuronetes/gateway-tls/tls.crt", "--quota-store-failure=open",
		"--blocked-answer=content_filter", "--listen=:8080", "--admin-listen=:9090", "--redis-prefix=nn:gw:",
		"--session-keys=header:x-session-id,header:x-conversation-id,body:conversation_id,body:metadata.conversation_id,body:user",
		"--scorer-weights=prefill=4,prefix=1,queue=1,kv=1,inflight=1,hash=1"} {
		if !contains(a, want) {
			t.Errorf("gateway args %v lack %s", a, want)
		}
	}
	if p := get(container(dep, "gateway"), "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness probe %v", p)
	}
	if svc := find(objs, "Service", "nn-neuronetes-gateway"); svc == nil || get(svc, "spec", "ports", 0, "targetPort") != "api" {
		t.Error("no API Service on the api port")
	}
	if adm := find(objs, "Service", "nn-neuronetes-gateway-admin"); adm == nil || get(adm, "spec", "clusterIP") != "None" {
		t.Error("no headless admin Service")
	}
	if pdb := find(objs, "PodDisruptionBudget", "nn-neuronetes-gateway"); pdb == nil {
		t.Error("no PodDisruptionBudget")
	}
	// watchNamespaces agents,chat: the gateway's rights are Roles there, no ClusterRole.
	if find(objs, "ClusterRole", "nn-neuronetes-gateway") != nil {
		t.Error("gateway ClusterRole rendered with watchNamespaces")
	}
	cr := find(objs, "Role", "nn-neuronetes-gateway")
	if cr == nil {
		t.Fatal("no gateway Role")
	}
	// Read-only, but for the Tenants' status (their APIKeysReady condition).
	for _, r := range cr["rules"].([]any) {
		rm := r.(map[string]any)
		statusOnly := fmt.Sprint(rm["resources"]) == "[tenants/status]"
		for _, v := range rm["verbs"].([]any) {
			if v != "get" && v != "list" && v != "watch" && !(statusOnly && v == "patch") {
				t.Errorf("gateway may %s %v: read-only expected (patch only on tenants/status)", v, rm["resources"])
			}
		}
	}
	if find(objs, "ServiceAccount", "nn-neuronetes-gateway") == nil {
		t.Error("no gateway ServiceAccount")
	}
	ctrl := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
	if !contains(ctrl, "--gateway-pods=neuronetes-system/app.kubernetes.io/component=gateway,app.kubernetes.io/instance=nn") {
		t.Errorf("controller args %v: the autoscaler does not read the gateway", ctrl)
	}

	objs, err = render(t, nil, []string{`gateway={"enabled":false}`})
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "Deployment", "nn-neuronetes-gateway") != nil {
		t.Error("gateway rendered while disabled")
	}
}

func TestChartGatewayRefusals(t *testing.T) {
	objs, err := render(t, nil, []string{`gateway={"auth":"none","anonymousNamespace":"demo"}`})
	if err != nil {
		t.Fatal(err)
	}
	if a := args(container(find(objs, "Deployment", "nn-neuronetes-gateway"), "gateway")); !contains(a, "--anonymous-namespace=demo") {
		t.Errorf("gateway args %v lack --anonymous-namespace=demo", a)
	}
	for _, tc := range []struct{ set, want string }{
		{`gateway={"auth":"maybe"}`, "auth"},
		{`gateway={"quotaStoreFailure":"sometimes"}`, "quotaStoreFailure"},
		{`gateway={"defaults":{"scorerWeights":"speed=1"}}`, "scorerWeights"},
		{`gateway={"defaults":{"sessionKeys":"cookie:x"}}`, "sessionKeys"},
		{`gateway={"timeouts":{"idle":"soon"}}`, "idle"},
		{`gateway={"terminationGracePeriodSeconds":5}`, "terminationGracePeriodSeconds"},
		{`gateway={"auth":"none"}`, "gateway.auth=none needs gateway.anonymousNamespace"},
		{`gateway={"anonymousNamespace":"demo"}`, "gateway.anonymousNamespace applies only with gateway.auth=none"},
		{`gateway={"auth":"none","anonymousNamespace":"Demo_NS"}`, "anonymousNamespace"},
	} {
		_, err := render(t, nil, []string{tc.set})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.set, err, tc.want)
		}
	}
}

// TestChartGatewaySessionKey: every replica mounts one session-key secret and passes it with
// --session-key-file: by default a Secret the chart creates with a random key of 64 characters,
// else the named one (and then the chart creates none).
func TestChartGatewaySessionKey(t *testing.T) {
	for _, tc := range []struct {
		set, secret string
		created     bool
	}{
		{`gateway={"replicas":2}`, "nn-neuronetes-gateway-session-key", true},
		{`gateway={"sessionKey":{"secretName":"my-key"}}`, "my-key", false},
	} {
		objs, err := render(t, nil, []string{tc.set})
		if err != nil {
			t.Fatal(err)
		}
		dep := find(objs, "Deployment", "nn-neuronetes-gateway")
		c := container(dep, "gateway")
		if !contains(args(c), "--session-key-file=/etc/neuronetes/gateway-session-key/session-key") {
			t.Errorf("%s: args %v lack --session-key-file", tc.set, args(c))
		}
		mounted := false
		for i := range 4 {
			if get(c, "volumeMounts", i, "name") == "session-key" && get(c, "volumeMounts", i, "mountPath") == "/etc/neuronetes/gateway-session-key" {
				mounted = true
			}
		}
		if !mounted || get(dep, "spec", "template", "spec", "volumes", 0, "secret", "secretName") != tc.secret ||
			get(dep, "spec", "template", "spec", "volumes", 0, "secret", "items", 0, "key") != "session-key" {
			t.Errorf("%s: session key volume %v, mounts %v; want Secret %s", tc.set, get(dep, "spec", "template", "spec", "volumes"), get(c, "volumeMounts"), tc.secret)
		}
		sec := find(objs, "Secret", "nn-neuronetes-gateway-session-key")
		if (sec != nil) != tc.created {
			t.Fatalf("%s: chart-made Secret %v, want created=%v", tc.set, sec, tc.created)
		}
		if sec != nil {
			v, _ := get(sec, "data", "session-key").(string)
			key, err := base64.StdEncoding.DecodeString(v)
			if err != nil || len(key) != 64 {
				t.Errorf("session key %q (%v): want 64 random characters", v, err)
			}
		}
	}
}
