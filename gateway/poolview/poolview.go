// Package poolview reads the gateway's per-pool view: the Prometheus text page every gateway
// replica serves at /pools/<namespace>/<name>/metrics on its admin port (gateway/metrics writes
// it). Everything that reads the view (the autoscaler's gateway source, the scheduler's headroom
// score, the demo) parses it and combines replicas here, so the rule for combining them is in
// one place: a series with scope="shared" is counted in the shared Redis table and is the same on
// every replica (taken once: the largest), any other is a replica's own (summed).
package poolview

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series names of the view. Every series has a "pod" label; pod="" holds what waits in the
// gateway before a pod is chosen.
const (
	// TokensInQueue: estimated prompt tokens of requests without a first token yet (seed 001
	// tokens_in_queue, measured where requests pass).
	TokensInQueue = "neuronetes_tokens_in_queue"
	// Sessions: sessions with a request in the last 5 minutes, by the pod they are pinned to;
	// label scope="shared" when counted in the shared Redis table (the same on every replica),
	// "replica" when counted by this replica alone.
	Sessions = "neuronetes_concurrent_sessions"
	// TTFT: the TTFT histogram of requests served by each pod (cumulative).
	TTFT = "neuronetes_ttft_seconds"
	// OfferedTokens: estimated prompt tokens of the requests that arrived at the pool (admitted
	// by quota), counted at arrival (counter, pod=""): the offered demand, which a backlog
	// draining after a burst does not inflate as a server's processed-token counter does.
	OfferedTokens = "neuronetes_offered_prompt_tokens_total"
)

// Families is one parsed page, by metric name.
type Families map[string]*dto.MetricFamily

// Path is the view's path for a pool on a gateway replica's admin port.
func Path(namespace, pool string) string {
	return "/pools/" + namespace + "/" + pool + "/metrics"
}

// Parse reads one Prometheus text page.
func Parse(r io.Reader) (Families, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics page: %w", err)
	}
	return fams, nil
}

// Scrape GETs url with c and parses the page; any answer but 200 is an error.
func Scrape(ctx context.Context, c *http.Client, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %s", url, resp.Status)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return fams, nil
}

// Label returns the value of m's label name ("" when m has none).
func Label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// SessionCount combines the Sessions series of any number of replicas' pages, by pod. The zero
// value is empty and ready to use; a nil *SessionCount counts nothing.
type SessionCount struct {
	shared  map[string]float64 // scope="shared": the largest any replica reported
	replica map[string]float64 // any other scope: summed over replicas
}

// Add folds one replica's page in. Samples that are NaN or negative are left out.
func (c *SessionCount) Add(fams Families) {
	if c.shared == nil {
		c.shared, c.replica = map[string]float64{}, map[string]float64{}
	}
	for _, m := range fams[Sessions].GetMetric() {
		pod, v := Label(m, "pod"), m.GetGauge().GetValue()
		if math.IsNaN(v) || v < 0 {
			continue
		}
		if Label(m, "scope") == "shared" {
			c.shared[pod] = max(c.shared[pod], v)
		} else {
			c.replica[pod] += v
		}
	}
}

// Pod returns the sessions pinned to pod: the shared count plus the replicas' own counts.
func (c *SessionCount) Pod(pod string) float64 {
	if c == nil {
		return 0
	}
	return c.shared[pod] + c.replica[pod]
}

// Split returns pod's shared count and the replicas' own counts apart.
func (c *SessionCount) Split(pod string) (shared, own float64) {
	if c == nil {
		return 0, 0
	}
	return c.shared[pod], c.replica[pod]
}

// Pods returns every pod with a count (pod="" included when reported).
func (c *SessionCount) Pods() []string {
	if c == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]float64{c.shared, c.replica} {
		for p := range m {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Total returns the sessions over all pods.
func (c *SessionCount) Total() float64 {
	if c == nil {
		return 0
	}
	t := 0.0
	for _, v := range c.shared {
		t += v
	}
	for _, v := range c.replica {
		t += v
	}
	return t
}
