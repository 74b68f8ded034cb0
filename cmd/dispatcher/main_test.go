package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" valid
	}{
		{[]string{"--gateway-url=http://g", "--redis-addr=r:6379"}, ""},
		{[]string{"--redis-addr=r:6379"}, "--gateway-url is required"},
		{[]string{"--gateway-url=http://g"}, "--redis-addr is required"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--static-bindings=f"}, "--static-model is required"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--static-model=m"}, "need --static-bindings"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--static-bindings=f", "--static-model=m", "--tool-callers=1.2.3.4"}, "not ip=namespace/pool"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--static-bindings=f", "--static-model=m", "--static-pool-replicas=0"}, "--static-pool-replicas must be >= 1"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--status-period=0s"}, "--status-period"},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--kafka-url=kafkas://u:p@k0:9093,k1:9093?sasl=scram-sha-512"}, ""},
		{[]string{"--gateway-url=http://g", "--redis-addr=r", "--kafka-url=kafka://u:p@k0:9092"}, "--kafka-url: SASL credentials need kafkas:// (TLS)"},
	} {
		fs := flag.NewFlagSet("d", flag.ContinueOnError)
		o := options{}
		o.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := o.validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestStaticNATS runs the assembled dispatcher in static mode against nats-server, redis-server
// and a stand-in gateway: every message gets one result, a message the gateway refuses is
// dead-lettered with its error after its retries, and the admin port serves the metrics.
func TestStaticNATS(t *testing.T) {
	url := queuetest.StartNATS(t)
	rs := redistest.Start(t, redistest.Options{})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for name, subj := range map[string][]string{"TASKS": {"tasks"}, "RESULTS": {"results", "dead"}} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subj}); err != nil {
			t.Fatal(err)
		}
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "POISON") {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":{"message":"messages: poison","code":"invalid_request"}}`))
			return
		}
		w.Header().Set("X-Request-Id", "r-"+r.Header.Get("X-Session-Id"))
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer gw.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "tb.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: tasks, namespace: demo}
spec:
  type: queue
  agentPoolRef: {name: agents}
  queueConfig:
    provider: nats
    queueName: TASKS
    prefetchCount: 8
    dispatch: {responseQueue: results, deadLetterQueue: dead, maxRetries: 2, initialBackoff: 10ms, maxBackoff: 50ms, dedupeTTL: 1h}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := freeAddr(t)
	o := &options{gatewayURL: gw.URL, redisAddr: rs.Addr, redisPrefix: "t:", natsURL: url, adminListen: admin, toolListen: "",
		drainTimeout: time.Second, statusPeriod: 200 * time.Millisecond, staticBindings: file, staticModel: "m", staticReady: 1, member: "d1", auditLog: ""}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx, o) }()
	for i := 0; i < 50; i++ {
		m := nats.NewMsg("tasks")
		m.Data = []byte(fmt.Sprintf("task %d", i))
		m.Header.Set(queue.HeaderKey, fmt.Sprintf("k%d", i%5))
		if i == 7 {
			m.Data = []byte("POISON")
		}
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	count := func(subject string) int {
		s, _ := js.Stream(ctx, "RESULTS")
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			return -1
		}
		return int(info.State.Subjects[subject])
	}
	deadline := time.Now().Add(30 * time.Second)
	for (count("results") < 49 || count("dead") < 1) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if r, d := count("results"), count("dead"); r != 49 || d != 1 {
		t.Fatalf("results %d dead %d, want 49 and 1", r, d)
	}
	rs2, _ := js.Stream(ctx, "RESULTS")
	dl, err := rs2.GetLastMsgForSubject(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	if string(dl.Data) != "POISON" || dl.Header.Get(queue.HeaderAttempts) != "1" || !strings.Contains(dl.Header.Get(queue.HeaderError), "messages: poison") || dl.Header.Get(queue.HeaderMessageID) != "m7" {
		t.Fatalf("dead letter %q headers %v", dl.Data, dl.Header)
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`neuronetes_tool_latency_seconds_count{agent_class="agents",tool_name="tasks"}`, `neuronetes_dispatch_messages_total{binding="demo/tasks",event="dead_lettered",provider="nats"} 1`,
		`neuronetes_dispatch_messages_total{binding="demo/tasks",event="succeeded",provider="nats"} 49`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dispatcher did not stop")
	}
}
