package front

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/affinity"
	gatewayv1 "github.com/neuronetes/neuronetes/gateway/api/v1"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/pick"
	"github.com/neuronetes/neuronetes/gateway/proxy"
	"github.com/neuronetes/neuronetes/gateway/quota"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// modelServer streams "tok0 " .. "tok4 " with 5 ms between tokens.
func modelServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		if !body.Stream {
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"tok0 tok1 tok2 tok3 tok4 "},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 5; i++ {
			time.Sleep(5 * time.Millisecond)
			fin := "null"
			if i == 4 {
				fin = `"stop"`
			}
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":%s}]}\n\n", i, fin)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

type keyAuth struct{}

func (keyAuth) Authenticate(_ context.Context, h http.Header) (*access.Tenant, *openai.Error) {
	if h.Get("Authorization") == "Bearer good" {
		return access.Anonymous, nil
	}
	return nil, openai.NewError(401, "invalid_request_error", "invalid_api_key", "", "invalid API key")
}

// gateway starts a front over one static pool and returns its base URL.
func gateway(t *testing.T, auth engine.Authenticator) string {
	t.Helper()
	return gatewayWith(t, auth, nil)
}

// gatewayWith is gateway with the Server's fields set by opts before Init.
func gatewayWith(t *testing.T, auth engine.Authenticator, opts func(*Server)) string {
	t.Helper()
	addr := modelServer(t)
	pool := &route.Pool{Ref: route.PoolRef{Name: "static"}, Model: "m", Policy: route.DefaultPolicy(),
		Endpoints: []route.Endpoint{{Pod: addr, Addr: addr}}}
	e := &engine.Engine{Table: route.NewTable(route.NewStaticSnapshot(pool)), Auth: auth,
		Pins: &affinity.Store{Mem: affinity.NewMemory(0, nil)}, Picker: &pick.Picker{Load: pick.NewLoad()},
		Admission: quota.NewAdmission(), Upstream: proxy.NewUpstream(proxy.Timeouts{}),
		Metrics: metrics.New(prometheus.NewRegistry()), Pools: metrics.NewPoolStats()}
	e.Init()
	s := &Server{Engine: e, MaxBodyBytes: 4096}
	if opts != nil {
		opts(s)
	}
	s.Init()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer("", nil)
	go hs.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx, hs)
	})
	return "http://" + l.Addr().String()
}

const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func sseTokens(t *testing.T, base string) []string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(engine.HeaderPod) == "" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	var toks []string
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if d == "[DONE]" {
			done = true
			break
		}
		toks = append(toks, contents(t, []byte(d))...)
	}
	if !done {
		t.Fatal("no [DONE]")
	}
	return toks
}

func contents(t *testing.T, d []byte) []string {
	c, err := openai.ParseChunk(d)
	if err != nil {
		t.Fatalf("chunk %s: %v", d, err)
	}
	var out []string
	for _, ch := range c.Choices {
		if s := ch.Content(); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func wsTokens(t *testing.T, base string) []string {
	t.Helper()
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/v1/chat/completions",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer good"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	var toks []string
	for round := 0; round < 2; round++ { // two requests on one socket
		if err := c.Write(ctx, websocket.MessageText, []byte(body)); err != nil {
			t.Fatal(err)
		}
		_, meta, err := c.Read(ctx)
		if err != nil || !strings.Contains(string(meta), `"object":"neuronetes.meta"`) || !strings.Contains(string(meta), `"pod"`) {
			t.Fatalf("meta %s %v", meta, err)
		}
		var got []string
		for {
			_, m, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(m) == "[DONE]" {
				break
			}
			got = append(got, contents(t, m)...)
		}
		if round == 0 {
			toks = got
		} else if strings.Join(got, "") != strings.Join(toks, "") {
			t.Fatalf("second request on the socket: %v", got)
		}
	}
	return toks
}

func grpcTokens(t *testing.T, base string) []string {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer good")
	st, err := gatewayv1.NewInferenceClient(cc).ChatCompletions(ctx, &gatewayv1.CompletionRequest{Model: "m", Stream: true,
		Messages: []*gatewayv1.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	var toks []string
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Content != "" {
				toks = append(toks, ch.Content)
			}
		}
		if len(c.Json) == 0 {
			t.Fatal("chunk without its JSON")
		}
	}
	hdr, _ := st.Header()
	if len(hdr.Get("x-neuronetes-pod")) == 0 {
		t.Fatalf("no pod header: %v", hdr)
	}
	return toks
}

// WebSocket and gRPC clients receive the same tokens as the SSE client.
func TestProtocolsSameTokens(t *testing.T) {
	base := gateway(t, keyAuth{})
	sse := sseTokens(t, base)
	if strings.Join(sse, "") != "tok0 tok1 tok2 tok3 tok4 " {
		t.Fatalf("sse %q", sse)
	}
	if ws := wsTokens(t, base); strings.Join(ws, "|") != strings.Join(sse, "|") {
		t.Fatalf("websocket %q, sse %q", ws, sse)
	}
	if g := grpcTokens(t, base); strings.Join(g, "|") != strings.Join(sse, "|") {
		t.Fatalf("grpc %q, sse %q", g, sse)
	}
}

func TestHTTPErrors(t *testing.T) {
	base := gateway(t, keyAuth{})
	post := func(auth, b string) (*http.Response, map[string]any) {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(b))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	for _, tc := range []struct {
		name, auth, body string
		status           int
		code             string
	}{
		{"no key", "", body, 401, "invalid_api_key"},
		{"too large", "Bearer good", big, 413, "request_too_large"},
		{"malformed", "Bearer good", `{`, 400, "bad_request"},
		{"unknown model", "Bearer good", `{"model":"x","messages":[{"role":"user","content":"a"}]}`, 404, "model_not_found"},
	} {
		resp, out := post(tc.auth, tc.body)
		e, _ := out["error"].(map[string]any)
		if resp.StatusCode != tc.status || e == nil || e["code"] != tc.code || e["message"] == "" {
			t.Errorf("%s: %d %v, want %d %s", tc.name, resp.StatusCode, out, tc.status, tc.code)
		}
	}
	resp, out := post("Bearer good", `{"model":"m","messages":[{"role":"user","content":"a"}]}`)
	if resp.StatusCode != 200 || out["object"] != "chat.completion" {
		t.Fatalf("non-streamed: %d %v", resp.StatusCode, out)
	}
	req, _ := http.NewRequest("GET", base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer good")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if !strings.Contains(string(b), `"id":"m"`) {
		t.Fatalf("models %s", b)
	}
}

func TestGRPCErrors(t *testing.T) {
	base := gateway(t, keyAuth{})
	cc, _ := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	c := gatewayv1.NewInferenceClient(cc)
	st, err := c.ChatCompletions(context.Background(), &gatewayv1.CompletionRequest{Model: "m", Stream: true,
		Messages: []*gatewayv1.Message{{Role: "user", Content: "hi"}}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "invalid_api_key") {
		t.Fatalf("no credentials: %v", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer good")
	st, err = c.ChatCompletions(ctx, &gatewayv1.CompletionRequest{Model: "nope", Stream: true,
		Messages: []*gatewayv1.Message{{Role: "user", Content: "hi"}}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model: %v", err)
	}
	st, err = c.ChatCompletions(ctx, &gatewayv1.CompletionRequest{Model: "m", Messages: []*gatewayv1.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := st.Recv()
	if err != nil || len(whole.Choices) != 1 || whole.Choices[0].Content != "tok0 tok1 tok2 tok3 tok4 " || whole.Usage.CompletionTokens != 5 {
		t.Fatalf("non-streamed over gRPC: %v %v", whole, err)
	}
}

// A draining front refuses new gRPC streams with UNAVAILABLE (and GOAWAY), so clients whose
// connections outlive the Service's endpoint change go elsewhere; HTTP requests are still served.
func TestDrainRefusesNewGRPCStreams(t *testing.T) {
	var srv *Server
	base := gatewayWith(t, keyAuth{}, func(s *Server) { srv = s })
	cc, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if got := grpcTokens(t, base); len(got) == 0 {
		t.Fatal("no tokens before the drain")
	}
	srv.Drain()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer good")
	st, err := gatewayv1.NewInferenceClient(cc).ChatCompletions(ctx, &gatewayv1.CompletionRequest{Model: "m", Stream: true,
		Messages: []*gatewayv1.Message{{Role: "user", Content: "hi"}}})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("new gRPC stream while draining: %v, want UNAVAILABLE", err)
	}
	if got := sseTokens(t, base); len(got) == 0 {
		t.Fatal("HTTP request refused while draining")
	}
}
