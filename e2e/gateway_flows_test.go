package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/gateway/access"
	gatewayv1 "github.com/neuronetes/neuronetes/gateway/api/v1"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
)

// TestGateway runs the gateway's acceptance list through the Service of a chart-deployed gateway;
// the fault subtests (a replica killed, Redis stopped) run last.
func TestGateway(t *testing.T) {
	g := gweSetup(t)
	t.Run("StreamFirstChunkBeforeLastToken", g.streamEarly)
	t.Run("BadInputAndAccess", g.errors)
	t.Run("AffinityRepinAndMemory", g.affinity)
	t.Run("ClientDisconnectReleasesEverything", g.disconnect)
	t.Run("TokenQuota429", g.quota)
	t.Run("WebSocketAndGRPCSameTokens", g.protocols)
	t.Run("AttackWebSocketAfterKeyRevoked", g.attackWebSocketAfterKeyRevoked)
	t.Run("AutoscalerScalesFromGatewayMetrics", g.autoscale)
	t.Run("FaultReplicaKilledDuringStreams", g.killReplica)
	t.Run("FaultRedisStopped", g.redisDown)
}

// 40 tokens at 40 tokens/s: the first chunk must reach the client about a second before the last
// token is generated.
func (g *gweEnv) streamEarly(t *testing.T) {
	r := g.send(t, gweKeyA, "s-early", true, 40, "Tell me a story.")
	if r.status != 200 || !r.done || r.header.Get("X-Neuronetes-Pod") == "" || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d done %v header %v", r.status, r.done, r.header)
	}
	if r.first <= 0 || r.total-r.first < 500*time.Millisecond {
		t.Fatalf("first chunk after %v of %v: not streamed before the last token", r.first, r.total)
	}
	t.Logf("first chunk %v, last %v, %d events, pod %s via %s", r.first, r.total, len(r.events), r.header.Get("X-Neuronetes-Pod"), r.header.Get("X-Neuronetes-Gateway"))
}

func (g *gweEnv) errors(t *testing.T) {
	post := func(key, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := g.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	ok := `{"model":"demo-llm","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"no key", "", ok, 401, "missing_api_key"},
		{"bad key", "sk-nobody", ok, 401, "invalid_api_key"},
		{"model not allowed", gweKeyB, ok, 404, "model_not_found"},
		{"unknown model", gweKeyLoad, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found"},
		{"malformed", gweKeyA, `{"model":`, 400, "bad_request"},
		{"missing messages", gweKeyA, `{"model":"demo-llm"}`, 400, "bad_request"},
		{"too large", gweKeyA, `{"model":"demo-llm","messages":[{"role":"user","content":"` + strings.Repeat("x", 9<<20) + `"}]}`, 413, "request_too_large"},
	} {
		status, out := post(tc.key, tc.body)
		e, _ := out["error"].(map[string]any)
		if status != tc.status || e == nil || e["code"] != tc.code {
			t.Errorf("%s: %d %v; want %d %s", tc.name, status, out, tc.status, tc.code)
		}
		if msg, _ := e["message"].(string); tc.status == 404 && (strings.Contains(msg, "embeddings") || strings.Contains(msg, "team")) {
			t.Errorf("%s: the error hints at other models or tenants: %s", tc.name, msg)
		}
	}
}

// scopedConv is the conversation id agent pods receive for tenant's session key conv: the key
// scoped by tenant with the secret of the chart-made Secret every replica mounts.
func (g *gweEnv) scopedConv(t *testing.T, tenant, conv string) string {
	t.Helper()
	sec, err := g.e.Kube.CoreV1().Secrets(g.ns).Get(context.Background(), g.ns+"-neuronetes-gateway-session-key", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("gateway session key Secret: %v", err)
	}
	sk, err := sessionkey.New([]byte(strings.TrimSpace(string(sec.Data["session-key"]))))
	if err != nil {
		t.Fatal(err)
	}
	return sk.Scope(&access.Tenant{Namespace: g.ns, Name: tenant}, conv)
}

// Two turns of one conversation land on the same pod; after that pod is deleted, the third lands
// on another pod, and the new pod's sidecar holds turns 1 and 2.
func (g *gweEnv) affinity(t *testing.T) {
	conv := fmt.Sprintf("conv-%d", time.Now().UnixNano())
	r1 := g.send(t, gweKeyA, conv, false, 4, "first turn: my name is Ada")
	r2 := g.send(t, gweKeyA, conv, false, 4, "second turn: I live in Turin")
	p1, p2 := r1.header.Get("X-Neuronetes-Pod"), r2.header.Get("X-Neuronetes-Pod")
	if r1.status != 200 || r2.status != 200 || p1 == "" || p1 != p2 || r1.header.Get("X-Neuronetes-Pin") != "new" || r2.header.Get("X-Neuronetes-Pin") != "held" {
		t.Fatalf("turns 1-2: %d %s %s, %d %s %s", r1.status, p1, r1.header.Get("X-Neuronetes-Pin"), r2.status, p2, r2.header.Get("X-Neuronetes-Pin"))
	}
	if err := g.e.Kube.CoreV1().Pods(g.ns).Delete(context.Background(), p1, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var r3 gweReply
	Eventually(t, 30*time.Second, "turn 3 served by another pod", func() (bool, error) {
		r3 = g.send(t, gweKeyA, conv, false, 4, "third turn: where do I live?")
		p3 := r3.header.Get("X-Neuronetes-Pod")
		return r3.status == 200 && p3 != "" && p3 != p1, fmt.Errorf("status %d pod %s", r3.status, p3)
	})
	if pin := r3.header.Get("X-Neuronetes-Pin"); pin != "repinned" {
		t.Errorf("turn 3 pin %q, want repinned", pin)
	}
	ip := g.podIP(t, r3.header.Get("X-Neuronetes-Pod"))
	// The sidecar keeps the session under the id the gateway sent the pod: team-a's scoped key.
	resp, err := g.hc.Get("http://" + net.JoinHostPort(ip, "7070") + "/v1/sessions/" + g.scopedConv(t, "team-a", conv))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Turns []struct{ Role, Content string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("session via the new pod's sidecar: %d %v", resp.StatusCode, err)
	}
	var users []string
	for _, tr := range doc.Turns {
		if tr.Role == "user" {
			users = append(users, tr.Content)
		}
	}
	if len(users) < 2 || users[0] != "first turn: my name is Ada" || users[1] != "second turn: I live in Turin" {
		t.Fatalf("the new pod's sidecar holds %v; want turns 1 and 2", users)
	}
}

// A client that disconnects mid-stream: the backend's running count is 0 within 1 s and the
// gateway's in-flight gauge is back to 0 on every replica.
func (g *gweEnv) disconnect(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"demo-llm","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"a long answer please"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+gweKeyA)
	req.Header.Set("X-Session-Id", "s-cancel")
	resp, err := g.hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	pod, via := resp.Header.Get("X-Neuronetes-Pod"), resp.Header.Get("X-Neuronetes-Gateway")
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	podMetrics := "http://" + net.JoinHostPort(g.podIP(t, pod), "8000") + "/metrics"
	if v, err := gweMetric(podMetrics, "vllm:num_requests_running", nil); err != nil || v < 1 {
		t.Fatalf("backend running %v %v while streaming", v, err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(time.Second)
	for {
		running, err1 := gweMetric(podMetrics, "vllm:num_requests_running", nil)
		inflight := 0.0
		var err2 error
		for _, p := range g.replicas(t) {
			v, err := gweMetric("http://"+net.JoinHostPort(p.Status.PodIP, "9090")+"/metrics", "neuronetes_gateway_inflight_requests", map[string]string{"pool": g.ns + "/chat"})
			if errors.Is(err, errMetricAbsent) && p.Name != via {
				err = nil // a replica that never served the pool has no series for it: none in flight
			}
			inflight += v
			err2 = errors.Join(err2, err)
		}
		if err1 == nil && err2 == nil && running == 0 && inflight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("1 s after the disconnect: backend running %v (%v), gateway in flight %v (%v)", running, err1, inflight, err2)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A tenant over its token rate gets 429 with Retry-After while another tenant is served.
func (g *gweEnv) quota(t *testing.T) {
	var last gweReply
	for i := 0; i < 12; i++ {
		last = g.send(t, gweKeyMetered, "", false, 100, "count to a hundred")
		if last.status == 429 {
			break
		}
		if last.status != 200 {
			t.Fatalf("request %d: %d %s", i, last.status, last.body)
		}
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" || !strings.Contains(last.body, "quota_tokens") {
		t.Fatalf("over quota: %d %q %s", last.status, last.header.Get("Retry-After"), last.body)
	}
	if r := g.send(t, gweKeyA, "", false, 4, "still served?"); r.status != 200 {
		t.Fatalf("another tenant: %d %s", r.status, r.body)
	}
}

// WebSocket and gRPC clients receive the same tokens as the SSE client.
func (g *gweEnv) protocols(t *testing.T) {
	sse := g.send(t, gweKeyA, "s-proto", true, 12, "same tokens please")
	if !sse.done || sse.content == "" {
		t.Fatalf("sse %+v", sse)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+g.addr+"/v1/chat/completions",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + gweKeyA}, "X-Session-Id": {"s-proto"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"model":"demo-llm","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"same tokens please"}]}`))
	ws := ""
	for {
		_, m, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m) == "[DONE]" {
			break
		}
		var ch struct {
			Choices []struct{ Delta struct{ Content string } } `json:"choices"`
		}
		if json.Unmarshal(m, &ch) == nil {
			for _, x := range ch.Choices {
				ws += x.Delta.Content
			}
		}
	}
	cc, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	mt := int32(12)
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+gweKeyA, "x-session-id", "s-proto")
	st, err := gatewayv1.NewInferenceClient(cc).ChatCompletions(gctx, &gatewayv1.CompletionRequest{Model: "demo-llm", Stream: true,
		MaxTokens: &mt, Messages: []*gatewayv1.Message{{Role: "user", Content: "same tokens please"}}})
	if err != nil {
		t.Fatal(err)
	}
	grpcText := ""
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range m.Choices {
			grpcText += ch.Content
		}
	}
	if ws != sse.content || grpcText != sse.content {
		t.Fatalf("tokens differ:\nsse  %q\nws   %q\ngrpc %q", sse.content, ws, grpcText)
	}
}

// The autoscaler scales pool "scaled" from what the gateway measures: one request in flight per
// pod per gateway replica (its RoutingPolicy), so the rest wait in the gateway; the gateway's
// tokens-in-queue exceed the pool's target while the pod's own queue stays under it.
func (g *gweEnv) autoscale(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prompt := strings.Repeat("word ", 200) // about 250 tokens by the gateway's estimate
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for ctx.Err() == nil {
				body := fmt.Sprintf(`{"model":"scaled","max_tokens":30,"messages":[{"role":"user","content":"%s %d"}]}`, prompt, i)
				req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+gweKeyLoad)
				if resp, err := g.hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	gwPeak, podPeak := 0.0, 0.0
	Eventually(t, 2*time.Minute, "the autoscaler scales pool scaled above 1", func() (bool, error) {
		for _, ip := range g.replicaIPs(t) {
			if v, err := gweMetric("http://"+net.JoinHostPort(ip, "9090")+"/pools/"+g.ns+"/scaled/metrics", "neuronetes_tokens_in_queue", nil); err == nil {
				gwPeak = max(gwPeak, v)
			}
		}
		for _, p := range poolPods(t, g.e, g.ns, "scaled")["serving"] {
			if v, err := gweMetric("http://"+net.JoinHostPort(p.Status.PodIP, "8000")+"/metrics", "neuronetes_tokens_in_queue", nil); err == nil {
				podPeak = max(podPeak, v)
			}
		}
		n := asReplicas(t, g.e, g.ns, "scaled")
		return n > 1, fmt.Errorf("spec.replicas %d; gateway tokens in queue peak %v, pod's own peak %v", n, gwPeak, podPeak)
	})
	t.Logf("scaled up: gateway tokens-in-queue peak %v (target 200 per replica), the pod's own peak %v; events %v",
		gwPeak, podPeak, asEvents(t, g.e, g.ns, "scaled"))
	if gwPeak <= 200 {
		t.Errorf("the gateway's tokens in queue peaked at %v, not above the target", gwPeak)
	}
}
