package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/gateway/poolview"
)

// The demo calls the gateway as a user would (docs/gateway.md, "Tenants, API keys and OIDC"): a
// Tenant in the pool's namespace whose API key is a value of a Secret labelled
// neuronetes.io/api-keys. The model is the AgentClass's name (class demo has no modelRef).
const (
	demoTenant      = "demo"
	demoKeySecret   = "demo-api-keys"
	demoKeyField    = "demo"
	demoModel       = "demo"
	gatewaySelector = "app.kubernetes.io/component=gateway,app.kubernetes.io/instance=neuronetes"
)

// gatewayEndpoint is the gateway as the demo reaches it.
type gatewayEndpoint struct {
	url      string       // http://<Service ClusterIP>:<port>, through kube-proxy
	replicas []corev1.Pod // ready replicas, for their admin ports
}

// demoAPIKey returns the demo tenant's API key: the one in its Secret when an earlier run left
// it, else a new random key, stored in the Secret together with the Tenant.
func (d *demo) demoAPIKey(ctx context.Context) (string, error) {
	key := ""
	s, err := d.kube.CoreV1().Secrets(demoNamespace).Get(ctx, demoKeySecret, metav1.GetOptions{})
	switch {
	case err == nil:
		key = string(s.Data[demoKeyField])
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("reading Secret %s/%s: %w", demoNamespace, demoKeySecret, err)
	}
	if key == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		key = "sk-nn-demo-" + hex.EncodeToString(b)
	}
	return key, d.apply(ctx, demoNamespace, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata:
  name: %[1]s
  labels: {neuronetes.io/api-keys: "true"}
stringData:
  %[2]s: %[3]s
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata:
  name: %[4]s
spec:
  apiKeys: [{secretName: %[1]s}]
  models: [%[5]s]
`, demoKeySecret, demoKeyField, key, demoTenant, demoModel))
}

// gateway finds the chart's gateway Service (the one with a ClusterIP; the admin Service is
// headless) and its ready replicas.
func (d *demo) gateway(ctx context.Context) (gatewayEndpoint, error) {
	var g gatewayEndpoint
	svcs, err := d.kube.CoreV1().Services(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: gatewaySelector})
	if err != nil {
		return g, err
	}
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone && len(s.Spec.Ports) > 0 {
			g.url = "http://" + net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(s.Spec.Ports[0].Port)))
		}
	}
	if g.url == "" {
		return g, fmt.Errorf("no gateway Service (%s) with a ClusterIP in %s: is gateway.enabled set in deploy/helm/values/local.yaml?", gatewaySelector, systemNamespace)
	}
	pods, err := d.kube.CoreV1().Pods(systemNamespace).List(ctx, metav1.ListOptions{LabelSelector: gatewaySelector})
	if err != nil {
		return g, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
			g.replicas = append(g.replicas, p)
		}
	}
	if len(g.replicas) == 0 {
		return g, fmt.Errorf("no ready gateway replica (%s) in %s", gatewaySelector, systemNamespace)
	}
	return g, nil
}

// waitRoutes waits until every gateway replica knows the demo key and routes the demo model to
// the pool's serving pods: GET /v1/models with the key lists the model, and the replica's
// neuronetes_gateway_endpoints for the pool equals serving.
func (d *demo) waitRoutes(ctx context.Context, g gatewayEndpoint, key string, serving int) error {
	pool := demoNamespace + "/demo"
	return waitFor(ctx, 90*time.Second, "gateway replicas routing model "+demoModel+" to "+strconv.Itoa(serving)+" pods", func() (bool, error) {
		for _, p := range g.replicas {
			api := "http://" + net.JoinHostPort(p.Status.PodIP, containerPort(p, "api", "8080"))
			body, err := httpGet(ctx, api+"/v1/models", key)
			if err != nil {
				return false, fmt.Errorf("replica %s: %w", p.Name, err)
			}
			if !strings.Contains(body, `"`+demoModel+`"`) {
				return false, fmt.Errorf("replica %s: /v1/models for tenant %s has no %q: %s", p.Name, demoTenant, demoModel, body)
			}
			fams, err := scrapeFamilies(ctx, adminURL(p)+"/metrics")
			if err != nil {
				return false, fmt.Errorf("replica %s: %w", p.Name, err)
			}
			if n := gaugeSum(fams, "neuronetes_gateway_endpoints", "pool", pool); n != float64(serving) {
				return false, fmt.Errorf("replica %s routes pool %s to %v endpoints", p.Name, pool, n)
			}
		}
		return true, nil
	})
}

// turn is one streamed exchange through the gateway.
type turn struct {
	reply             streamReply
	pod, pin, replica string
	ttft, total       time.Duration
}

// turnClient opens a connection per turn, as separate clients would: kube-proxy may then send
// each turn to a different gateway replica, and the pin, shared in Redis, must hold on either.
var turnClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// chatStream sends one user message of conversation conv through the gateway's Service,
// streamed, with the conversation id as the session key (X-Conversation-Id, a default session
// key of the gateway and the sidecar's session id).
func chatStream(ctx context.Context, url, key, conv, text string) (turn, error) {
	body, _ := json.Marshal(map[string]any{"model": demoModel, "stream": true, "max_tokens": 16,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": text}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return turn{}, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Conversation-Id", conv)
	start := time.Now()
	resp, err := turnClient.Do(req)
	if err != nil {
		return turn{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return turn{}, fmt.Errorf("status %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return turn{}, fmt.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	t := turn{pod: resp.Header.Get("X-Neuronetes-Pod"), pin: resp.Header.Get("X-Neuronetes-Pin"), replica: resp.Header.Get("X-Neuronetes-Gateway")}
	t.reply, err = readSSE(resp.Body, time.Now)
	t.total = time.Since(start)
	if !t.reply.First.IsZero() {
		t.ttft = t.reply.First.Sub(start)
	}
	if err != nil {
		return t, err
	}
	if t.reply.Usage == nil {
		return t, fmt.Errorf("no usage chunk although stream_options.include_usage was set")
	}
	return t, nil
}

// gatewaySessions is what the autoscaler reads from the gateway for the demo pool: the sessions
// active in the last 5 minutes, summed over pods the way controller/scaleloop/gateway_source.go
// sums replicas (scope "shared" is the Redis count, the same on every replica: taken once;
// scope "replica" is summed).
func (d *demo) gatewaySessions(ctx context.Context, g gatewayEndpoint) (float64, error) {
	var views []poolview.Families
	for _, p := range g.replicas {
		fams, err := scrapeFamilies(ctx, adminURL(p)+poolview.Path(demoNamespace, "demo"))
		if err != nil {
			return 0, fmt.Errorf("replica %s: %w", p.Name, err)
		}
		views = append(views, fams)
	}
	return sessionsOf(views), nil
}

// sessionsOf sums the sessions over pods as gateway/poolview combines replicas.
func sessionsOf(views []poolview.Families) float64 {
	var c poolview.SessionCount
	for _, fams := range views {
		c.Add(fams)
	}
	return c.Total()
}

// gaugeSum sums the gauge samples of name whose label key is value.
func gaugeSum(fams poolview.Families, name, key, value string) float64 {
	sum := 0.0
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			if poolview.Label(m, key) == value {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// scrapeFamilies reads a Prometheus text page.
func scrapeFamilies(ctx context.Context, url string) (poolview.Families, error) {
	body, err := httpGet(ctx, url, "")
	if err != nil {
		return nil, err
	}
	fams, err := poolview.Parse(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	return fams, nil
}

// httpGet returns the body of a 200 answer to GET url (with a bearer key when not empty).
func httpGet(ctx context.Context, url, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// adminURL is a gateway replica's admin port.
func adminURL(p corev1.Pod) string {
	return "http://" + net.JoinHostPort(p.Status.PodIP, containerPort(p, "admin", "9090"))
}

// containerPort returns the number of the named port of p's containers, or def.
func containerPort(p corev1.Pod, name, def string) string {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name {
				return strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	return def
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
