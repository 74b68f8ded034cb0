package helm_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestChartDispatcher renders the dispatcher: Deployment with 2 replicas by default, its flags,
// the gateway Service as its target, the API-key Secret in its environment, the tool and
// headless admin Services, the PodDisruptionBudget and RBAC that writes only ToolBinding status
// and verifies tool callers (TokenReviews, pods get).
func TestChartDispatcher(t *testing.T) {
	objs, err := render(t, nil, []string{`dispatcher={"gatewayAPIKeySecret":{"name":"dispatch-key","key":"k"},"watchNamespaces":["agents"],"defaults":{"natsURL":"nats://nats.queues:4222","kafkaURL":"kafka-0.kafka:9092"}}`})
	if err != nil {
		t.Fatal(err)
	}
	dep := find(objs, "Deployment", "nn-neuronetes-dispatcher")
	if dep == nil {
		t.Fatal("no dispatcher Deployment")
	}
	if r, _ := get(dep, "spec", "replicas").(float64); r != 2 {
		t.Errorf("replicas %v, want 2", get(dep, "spec", "replicas"))
	}
	c := container(dep, "dispatcher")
	a := args(c)
	for _, want := range []string{"--gateway-url=http://nn-neuronetes-gateway.neuronetes-system.svc:80", "--redis-addr=nn-neuronetes-redis.neuronetes-system.svc:6379",
		"--namespaces=agents", "--nats-url=nats://nats.queues:4222", "--kafka-url=kafka-0.kafka:9092", "--drain-timeout=25s", "--admin-listen=:9091", "--tool-listen=:8091"} {
		if !contains(a, want) {
			t.Errorf("dispatcher args %v lack %s", a, want)
		}
	}
	env := get(c, "env")
	if !strings.Contains(toJSON(env), `"name":"NEURONETES_GATEWAY_API_KEY"`) || !strings.Contains(toJSON(env), `"name":"dispatch-key"`) || !strings.Contains(toJSON(env), `"POD_NAME"`) {
		t.Errorf("env %s", toJSON(env))
	}
	// The dispatcher's own credential: one chart-made Secret, in its env and on the gateway's
	// --dispatcher-token-file, so calls can name the bound pool.
	if sec := find(objs, "Secret", "nn-neuronetes-dispatcher-token"); sec == nil || get(sec, "data", "token") == nil {
		t.Error("no dispatcher token Secret")
	}
	if !strings.Contains(toJSON(env), `"name":"NEURONETES_GATEWAY_DISPATCH_TOKEN","valueFrom":{"secretKeyRef":{"key":"token","name":"nn-neuronetes-dispatcher-token"}}`) {
		t.Errorf("dispatcher env lacks the dispatch token: %s", toJSON(env))
	}
	gw := find(objs, "Deployment", "nn-neuronetes-gateway")
	if !contains(args(container(gw, "gateway")), "--dispatcher-token-file=/etc/neuronetes/dispatcher-token/token") ||
		!strings.Contains(toJSON(get(gw, "spec", "template", "spec", "volumes")), `"secretName":"nn-neuronetes-dispatcher-token"`) {
		t.Errorf("gateway does not mount the dispatcher token: %v", args(container(gw, "gateway")))
	}
	if svc := find(objs, "Service", "nn-neuronetes-tools"); svc == nil || get(svc, "spec", "ports", 0, "targetPort") != "tools" {
		t.Error("no tool proxy Service")
	}
	if adm := find(objs, "Service", "nn-neuronetes-dispatcher-admin"); adm == nil || get(adm, "spec", "clusterIP") != "None" {
		t.Error("no headless admin Service")
	}
	if find(objs, "PodDisruptionBudget", "nn-neuronetes-dispatcher") == nil {
		t.Error("no PodDisruptionBudget")
	}
	cr := find(objs, "ClusterRole", "nn-neuronetes-dispatcher")
	if cr == nil {
		t.Fatal("no dispatcher ClusterRole")
	}
	reviews := false
	for _, r := range cr["rules"].([]any) {
		rule := r.(map[string]any)
		res := toJSON(rule["resources"])
		for _, v := range rule["verbs"].([]any) {
			switch {
			case res == `["tokenreviews"]` && v == "create":
				reviews = true
			case res == `["pods"]` && v != "get":
				t.Errorf("dispatcher may %s pods: it only reads the pod a caller's token is bound to", v)
			case v != "get" && v != "list" && v != "watch" && res != `["toolbindings/status"]`:
				t.Errorf("dispatcher may %s %v: only ToolBinding status is written", v, rule["resources"])
			}
		}
		if strings.Contains(toJSON(rule["resources"]), "secrets") {
			t.Error("the dispatcher reads Secrets")
		}
	}
	if !reviews {
		t.Error("the dispatcher may not create TokenReviews: it cannot verify tool callers")
	}
	// Without a gateway to send through, the dispatcher is not rendered and the notes say why.
	objs, err = render(t, nil, []string{`gateway={"enabled":false}`})
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "Deployment", "nn-neuronetes-dispatcher") != nil || find(objs, "ClusterRole", "nn-neuronetes-dispatcher") != nil {
		t.Error("dispatcher rendered without a gateway")
	}
	out, err := helm(t, append([]string{"install", "nn", chartDir(t), "--dry-run=client", "--namespace", "neuronetes-system"}, "--set-json", `gateway={"enabled":false}`)...)
	if err != nil || !strings.Contains(out, "The dispatcher is NOT installed") {
		t.Errorf("notes do not say the dispatcher is missing: %v\n%s", err, out)
	}
	objs, err = render(t, nil, []string{`gateway={"enabled":false}`, `dispatcher={"gatewayURL":"http://gw.example:8080"}`})
	if err != nil {
		t.Fatal(err)
	}
	if d := find(objs, "Deployment", "nn-neuronetes-dispatcher"); d == nil || !contains(args(container(d, "dispatcher")), "--gateway-url=http://gw.example:8080") {
		t.Error("dispatcher.gatewayURL not used")
	}
}

func TestChartDispatcherRefusals(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{`dispatcher={"gatewayURL":"gw:8080"}`, "gatewayURL"},
		{`dispatcher={"defaults":{"natsURL":"localhost:4222"}}`, "natsURL"},
		{`dispatcher={"redis":{"address":"redis"}}`, "address"},
		{`dispatcher={"terminationGracePeriodSeconds":20}`, "terminationGracePeriodSeconds"},
		{`dispatcher={"bogus":1}`, "bogus"},
	} {
		_, err := render(t, nil, []string{tc.set})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.set, err, tc.want)
		}
	}
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestChartAutoscalerQueueURLs: the autoscaler gets the default Kafka and Redis Streams brokers.
func TestChartAutoscalerQueueURLs(t *testing.T) {
	objs, err := render(t, nil, []string{`autoscaler={"kafkaURL":"kafka-0.kafka:9092","redisQueueURL":"redis://queues:6379/1"}`})
	if err != nil {
		t.Fatal(err)
	}
	a := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
	for _, want := range []string{"--kafka-url=kafka-0.kafka:9092", "--redis-queue-url=redis://queues:6379/1"} {
		if !contains(a, want) {
			t.Errorf("controller args %v lack %s", a, want)
		}
	}
	if _, err := render(t, nil, []string{`autoscaler={"redisQueueURL":"queues:6379"}`}); err == nil || !strings.Contains(err.Error(), "redisQueueURL") {
		t.Errorf("a redis URL without scheme: %v", err)
	}
}

// TestChartDispatcherArgsAreStrings: every argument renders as a YAML string, even a value with
// ": " in it (a bare "--redis-prefix=nn:dispatch:" would be a YAML map).
func TestChartDispatcherArgsAreStrings(t *testing.T) {
	objs, err := render(t, nil, []string{`redis={"bundled":{"enabled":false},"address":"r:6379"}`, `dispatcher={"redis":{"prefix":"x: y:"},"watchNamespaces":["a"],"defaults":{"natsURL":"nats://n:4222"}}`})
	if err != nil {
		t.Fatal(err)
	}
	c := container(find(objs, "Deployment", "nn-neuronetes-dispatcher"), "dispatcher")
	for _, a := range c["args"].([]any) {
		if _, ok := a.(string); !ok {
			t.Errorf("argument %v is a %T, not a string", a, a)
		}
	}
	if !contains(args(c), "--redis-prefix=x: y:") {
		t.Errorf("args %v", args(c))
	}
}
