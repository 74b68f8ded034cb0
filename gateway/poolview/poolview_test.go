package poolview

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const head = "# TYPE neuronetes_concurrent_sessions gauge\n"

func page(t *testing.T, body string) Families {
	t.Helper()
	f, err := Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSessionCount combines replicas' pages: a shared (Redis) count is the same on every replica
// and is taken once per pod (the largest), replica-scoped counts add up.
func TestSessionCount(t *testing.T) {
	a := head + `neuronetes_concurrent_sessions{pod="p1",scope="shared"} 3
neuronetes_concurrent_sessions{pod="p2",scope="shared"} 1
`
	b := head + `neuronetes_concurrent_sessions{pod="p1",scope="shared"} 2
neuronetes_concurrent_sessions{pod="p2",scope="shared"} 1
`
	own := head + `neuronetes_concurrent_sessions{pod="p1",scope="replica"} 2
neuronetes_concurrent_sessions{pod="p3",scope="replica"} 1
`
	bad := head + `neuronetes_concurrent_sessions{pod="p1",scope="replica"} -4
neuronetes_concurrent_sessions{pod="p2",scope="shared"} NaN
`
	for _, tc := range []struct {
		name   string
		pages  []string
		total  float64
		p1     float64
		shared float64 // p1's shared part
	}{
		{"one replica", []string{a}, 4, 3, 3},
		{"two replicas share the Redis count", []string{a, b}, 4, 3, 3},
		{"replica counts add up", []string{own, own}, 6, 4, 0},
		{"mixed", []string{a, own}, 7, 5, 3},
		{"negative and NaN samples are left out", []string{bad, own}, 3, 2, 0},
		{"no sessions metric", []string{"# TYPE other gauge\nother 1\n"}, 0, 0, 0},
		{"no replicas", nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c SessionCount
			for _, p := range tc.pages {
				c.Add(page(t, p))
			}
			if got := c.Total(); got != tc.total {
				t.Errorf("Total = %v, want %v", got, tc.total)
			}
			if got := c.Pod("p1"); got != tc.p1 {
				t.Errorf("Pod(p1) = %v, want %v", got, tc.p1)
			}
			if sh, own := c.Split("p1"); sh != tc.shared || sh+own != tc.p1 {
				t.Errorf("Split(p1) = %v, %v, want shared %v of %v", sh, own, tc.shared, tc.p1)
			}
		})
	}
	var nilCount *SessionCount
	if nilCount.Total() != 0 || nilCount.Pod("p1") != 0 || len(nilCount.Pods()) != 0 {
		t.Error("a nil count must count nothing")
	}
}

func TestLabelAndParse(t *testing.T) {
	f := page(t, head+`neuronetes_concurrent_sessions{pod="p1",scope="shared"} 3`+"\n")
	m := f[Sessions].GetMetric()[0]
	if Label(m, "pod") != "p1" || Label(m, "scope") != "shared" || Label(m, "absent") != "" {
		t.Errorf("labels of %v", m)
	}
	if _, err := Parse(strings.NewReader("not metrics {")); err == nil {
		t.Error("Parse accepted a malformed page")
	}
	if got := Path("ns", "pool"); got != "/pools/ns/pool/metrics" {
		t.Errorf("Path = %q", got)
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path("ns", "ok") {
			http.Error(w, "no such pool", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(head + `neuronetes_concurrent_sessions{pod="p1",scope="replica"} 2` + "\n"))
	}))
	defer srv.Close()
	f, err := Scrape(context.Background(), srv.Client(), srv.URL+Path("ns", "ok"))
	if err != nil {
		t.Fatal(err)
	}
	var c SessionCount
	c.Add(f)
	if c.Pod("p1") != 2 {
		t.Errorf("scraped p1 = %v, want 2", c.Pod("p1"))
	}
	if _, err := Scrape(context.Background(), srv.Client(), srv.URL+Path("ns", "missing")); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 answer: err %v, want one naming the status", err)
	}
}
