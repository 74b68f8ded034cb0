package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func poolPod(name, node string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Labels: map[string]string{nnv1.PoolLabel: "pool"}},
		Spec: v1.PodSpec{NodeName: node}}
}

func nodeInfo(name string, pods ...*v1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// TestHeadroomGatewayLoad: with gatewayURLs, NeuroNetesHeadroom reads the gateway replicas' per-pool
// views and prefers the node with two idle replicas over the one whose single replica holds 5
// sessions (replica counting alone prefers the latter); a replica that fails is left out; views
// are reused for loadTTL; a bad URL is refused naming the field.
func TestHeadroomGatewayLoad(t *testing.T) {
	var reads atomic.Int32
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		if r.URL.Path != "/pools/a/pool/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# TYPE neuronetes_concurrent_sessions gauge\n"+
			`neuronetes_concurrent_sessions{pod="busy",scope="shared"} 5`+"\n"+
			`neuronetes_concurrent_sessions{pod="idle1",scope="shared"} 0`+"\n")
	}))
	defer gw.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	ctx := context.Background()
	nodes := []fwk.NodeInfo{nodeInfo("n-busy", poolPod("busy", "n-busy")), nodeInfo("n-idle", poolPod("idle1", "n-idle"), poolPod("idle2", "n-idle"))}
	score := func(urls ...string) (busy, idle int64, h *headroomPlugin) {
		raw := fmt.Sprintf(`{"gatewayURLs":[%s]}`, quoteAll(urls))
		p, err := newHeadroom(ctx, &runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h = p.(*headroomPlugin)
		pod := poolPod("new", "")
		state := framework.NewCycleState()
		if s := h.PreScore(ctx, state, pod, nodes); !s.IsSuccess() {
			t.Fatalf("PreScore: %v", s)
		}
		list := make(fwk.NodeScoreList, len(nodes))
		for i, n := range nodes {
			s, st := h.Score(ctx, state, pod, n)
			if !st.IsSuccess() {
				t.Fatalf("Score: %v", st)
			}
			list[i] = fwk.NodeScore{Name: n.Node().Name, Score: s}
		}
		h.NormalizeScore(ctx, state, pod, list)
		return list[0].Score, list[1].Score, h
	}
	if busy, idle, _ := score(); busy <= idle {
		t.Errorf("without gateway: busy node %d, idle node %d: want replica counting (1 < 2 replicas)", busy, idle)
	}
	busy, idle, h := score(gw.URL, down.URL)
	if idle <= busy {
		t.Errorf("with gateway load: busy node %d, idle node %d: want the idle node higher", busy, idle)
	}
	if busy, idle, _ := score(down.URL); busy <= idle {
		t.Errorf("gateway down: busy node %d, idle node %d: want replica counting", busy, idle)
	}
	n := reads.Load()
	h.load(ctx, "a", "pool")
	if reads.Load() != n {
		t.Errorf("a fresh view was read again")
	}
	h.now = func() time.Time { return time.Now().Add(loadTTL) }
	h.load(ctx, "a", "pool")
	if reads.Load() == n {
		t.Errorf("a view older than loadTTL was reused")
	}
	_, err := newHeadroom(ctx, &runtime.Unknown{Raw: []byte(`{"gatewayURLs":["gw:9090"]}`), ContentType: runtime.ContentTypeJSON}, nil)
	if err == nil || !strings.Contains(err.Error(), "NeuroNetesHeadroom args gatewayURLs[0]") {
		t.Errorf("bad URL: error %v, want one naming gatewayURLs[0]", err)
	}
}

func quoteAll(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ",")
}

// replicaServer serves a per-pool view holding sessions replica-local sessions of pod busy on
// addr ("127.0.0.2:0" or with a port).
func replicaServer(t *testing.T, addr string, sessions int) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listening on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE neuronetes_concurrent_sessions gauge\nneuronetes_concurrent_sessions{pod=\"busy\",scope=\"replica\"} %d\n", sessions)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestHeadroomReadsEveryAddressOfAName: an http gatewayURL whose host is a name (the gateway's
// headless admin Service) is read at every address the name resolves to, so replica-local session
// counts add up over the replicas (3 + 2); an IP URL is read as it is, without a lookup; a name
// that does not resolve is read as it is and fails (replica counting).
func TestHeadroomReadsEveryAddressOfAName(t *testing.T) {
	a := replicaServer(t, "127.0.0.1:0", 3)
	_, port, _ := net.SplitHostPort(a.Listener.Addr().String())
	replicaServer(t, "127.0.0.2:"+port, 2)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		url    string
		lookup func(context.Context, string) ([]string, error)
		want   float64
		nilful bool
	}{
		{"headless Service name", "http://gw-admin.ns.svc:" + port, func(_ context.Context, host string) ([]string, error) {
			if host != "gw-admin.ns.svc" {
				return nil, fmt.Errorf("looked up %q", host)
			}
			return []string{"127.0.0.2", "127.0.0.1"}, nil
		}, 5, false},
		{"IP address", a.URL, func(context.Context, string) ([]string, error) {
			return nil, errors.New("an IP URL was looked up")
		}, 3, false},
		{"name that does not resolve", "http://gw-admin.invalid:" + port, func(context.Context, string) ([]string, error) {
			return nil, errors.New("no such host")
		}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newHeadroom(ctx, &runtime.Unknown{Raw: []byte(fmt.Sprintf(`{"gatewayURLs":[%q]}`, tc.url)), ContentType: runtime.ContentTypeJSON}, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := p.(*headroomPlugin)
			h.lookup = tc.lookup
			l := h.load(ctx, "a", "pool")
			if (l == nil) != tc.nilful {
				t.Fatalf("load %v, want nil=%v", l, tc.nilful)
			}
			if got := l.Sessions("busy"); got != tc.want {
				t.Errorf("sessions of busy %v, want %v", got, tc.want)
			}
		})
	}
}
