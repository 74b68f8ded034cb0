package route

import (
	"strings"
	"testing"
)

func TestParseKeySources(t *testing.T) {
	got, err := ParseKeySources("header:x-session-id, body:conversation_id,body:metadata.chat,body:user")
	if err != nil || len(got) != 4 || got[2].Body != "metadata.chat" || got[0].Header != "x-session-id" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"x-session-id", "cookie:a", "body:messages", "body:metadata.", "header:"} {
		if _, err := ParseKeySources(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseWeights(t *testing.T) {
	w, err := ParseWeights("prefix=5,hash=0", DefaultPolicy().Weights)
	if err != nil || w.PrefixCache != 5 || w.Hash != 0 || w.Queue != 1 || w.Prefill != 4 {
		t.Fatalf("%+v %v", w, err)
	}
	for _, bad := range []string{"prefix", "prefix=-1", "speed=2", "queue=x"} {
		if _, err := ParseWeights(bad, Weights{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseBackends(t *testing.T) {
	eps, err := ParseBackends("http://127.0.0.1:8001, 127.0.0.1:8002")
	if err != nil || len(eps) != 2 || eps[1].Pod != "127.0.0.1:8002" || eps[0].MetricsURL != "http://127.0.0.1:8001/metrics" {
		t.Fatalf("%v %v", eps, err)
	}
	eps, err = ParseBackends("http://127.0.0.1:8001?kv-events-port=5557,127.0.0.1:8002")
	if err != nil || eps[0].KVEvents != "tcp://127.0.0.1:5557" || eps[0].Pod != "127.0.0.1:8001" || eps[1].KVEvents != "" {
		t.Fatalf("kv-events-port: %+v %v", eps, err)
	}
	for _, bad := range []string{"", "https://a:1", "a", "http://a:1/v1", "a:1,a:1",
		"a:1?kv-events-port=x", "a:1?kv-events-port=70000", "a:1?other=1"} {
		if _, err := ParseBackends(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSnapshotResolve(t *testing.T) {
	a := &Pool{Ref: PoolRef{Namespace: "ns", Name: "b"}, Model: "m"}
	b := &Pool{Ref: PoolRef{Namespace: "ns", Name: "a"}, Model: "m", Endpoints: []Endpoint{{Pod: "z"}, {Pod: "y"}}}
	c := &Pool{Ref: PoolRef{Namespace: "other", Name: "c"}, Model: "m"}
	s := NewSnapshot([]*Pool{a, b, c})
	got := s.Resolve("ns", "m")
	if len(got) != 2 || got[0].Ref.Name != "a" || got[0].Endpoints[0].Pod != "y" {
		t.Fatalf("resolve %v", got)
	}
	if _, ok := got[0].Endpoint("z"); !ok {
		t.Fatal("endpoint lookup")
	}
	if len(s.Resolve("ns", "x")) != 0 || strings.Join(s.Models("other"), ",") != "m" {
		t.Fatal("namespaces mixed")
	}
	st := NewStaticSnapshot(&Pool{Ref: PoolRef{Name: "static"}})
	if len(st.Resolve("any", "whatever")) != 1 {
		t.Fatal("static pool without a model serves every model")
	}
}
