// Package scalesim is the offline autoscaling simulator: it replays LLM
// request traces against a replica model and compares autoscaling policies:
// NeuroNetes (the controller/scalepolicy decision package
// itself), re-implementations of the Kubernetes HPA, KEDA, Knative KPA and
// AIBrix APA with their documented defaults, and an oracle that knows the future.
package scalesim

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Request is one trace entry.
type Request struct {
	// Arrival is seconds since the start of the trace.
	Arrival float64
	// In and Out are prompt and generated token counts.
	In, Out int
}

// Trace is a named, arrival-ordered request list.
type Trace struct {
	// Name is the file's base name without extension.
	Name string
	// Requests are ordered by Arrival, the first at 0.
	Requests []Request
}

// Duration is the arrival time of the last request.
func (t Trace) Duration() float64 {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Arrival
}

// LoadTrace reads an Azure LLM inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens)
// or a Mooncake JSONL trace (timestamp ms, input_length, output_length), chosen by
// extension. maxDuration > 0 keeps only requests arriving before it.
func LoadTrace(path string, maxDuration time.Duration) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	var reqs []Request
	switch filepath.Ext(path) {
	case ".csv":
		reqs, err = readAzure(f)
	case ".jsonl":
		reqs, err = readMooncake(f)
	default:
		err = fmt.Errorf("unknown trace format %q (want .csv or .jsonl)", filepath.Ext(path))
	}
	if err != nil {
		return Trace{}, fmt.Errorf("trace %s: %w", path, err)
	}
	if len(reqs) == 0 {
		return Trace{}, fmt.Errorf("trace %s: no requests", path)
	}
	t0 := reqs[0].Arrival
	out := reqs[:0]
	for _, r := range reqs {
		r.Arrival -= t0
		if maxDuration > 0 && r.Arrival >= maxDuration.Seconds() {
			break
		}
		out = append(out, r)
	}
	return Trace{Name: name, Requests: out}, nil
}

const azureLayout = "2006-01-02 15:04:05.999999999"

func readAzure(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if len(head) < 3 || head[0] != "TIMESTAMP" {
		return nil, fmt.Errorf("header: want TIMESTAMP,ContextTokens,GeneratedTokens, got %v", head)
	}
	var out []Request
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		ts, err := time.Parse(azureLayout, strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, fmt.Errorf("line %d: TIMESTAMP: %w", line, err)
		}
		in, err1 := strconv.Atoi(rec[1])
		gen, err2 := strconv.Atoi(rec[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: token counts: %w", line, errors.Join(err1, err2))
		}
		out = append(out, Request{Arrival: float64(ts.UnixNano()) / 1e9, In: in, Out: gen})
	}
}

func readMooncake(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []Request
	for line := 1; sc.Scan(); line++ {
		var e struct {
			Timestamp float64 `json:"timestamp"`
			In        int     `json:"input_length"`
			Out       int     `json:"output_length"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, Request{Arrival: e.Timestamp / 1000, In: e.In, Out: e.Out})
	}
	return out, sc.Err()
}

// AutoSLO is the TTFT SLO a user would set for tr on m's replicas: the
// unloaded TTFT (own prefill time) of the trace's promptPercentile-th
// percentile prompt plus queueing, rounded up to 100 ms. Every request with a
// prompt at or below that percentile can meet it with queueing to spare.
func AutoSLO(tr Trace, m Model, promptPercentile float64, queueing time.Duration) (time.Duration, error) {
	if len(tr.Requests) == 0 {
		return 0, fmt.Errorf("auto SLO: trace %s has no requests", tr.Name)
	}
	if promptPercentile <= 0 || promptPercentile > 100 {
		return 0, fmt.Errorf("auto SLO: prompt percentile must be in (0,100], got %v", promptPercentile)
	}
	if m.PrefillTPS <= 0 {
		return 0, fmt.Errorf("auto SLO: prefill-tps must be > 0, got %v", m.PrefillTPS)
	}
	ins := make([]int, len(tr.Requests))
	for i, r := range tr.Requests {
		ins[i] = r.In
	}
	sort.Ints(ins)
	k := max(int(math.Ceil(promptPercentile/100*float64(len(ins))))-1, 0)
	secs := float64(ins[k])/m.PrefillTPS + queueing.Seconds()
	return time.Duration(math.Ceil(secs*10-1e-9)) * 100 * time.Millisecond, nil
}
