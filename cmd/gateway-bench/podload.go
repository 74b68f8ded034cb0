package main

import (
	"fmt"
	"math"
	"sort"

	"time"
)

// span is one request of a column: the pod that served it and when it ran, as the client saw it.
type span struct {
	pod        string
	start, end time.Time
}

// joinedLoad is, over requests, the mean number of the column's other requests in flight on the
// pod a request went to when it was sent, and the same for the pods it did not go to (the mean
// over those pods at that moment). A picker that spreads the load sends a request to a pod no
// busier than the others; one that herds (stale load signals, ties broken the same way) sends
// it to a busier one, whose engine then starts it later. NaN for no request or one pod.
func joinedLoad(spans []span) (picked, others float64) {
	type edge struct {
		at    time.Time
		pod   string
		start bool
		i     int
	}
	pods := map[string]bool{}
	edges := make([]edge, 0, 2*len(spans))
	for i, s := range spans {
		pods[s.pod] = true
		edges = append(edges, edge{s.start, s.pod, true, i}, edge{s.end, s.pod, false, i})
	}
	// Ends before starts at the same instant: a request sent as another ends does not count it.
	sort.Slice(edges, func(a, b int) bool {
		if !edges[a].at.Equal(edges[b].at) {
			return edges[a].at.Before(edges[b].at)
		}
		return !edges[a].start && edges[b].start
	})
	inflight := map[string]int{}
	total := 0
	var sumPicked, sumOthers float64
	n := 0
	for _, e := range edges {
		if !e.start {
			inflight[e.pod]--
			total--
			continue
		}
		if len(pods) > 1 {
			sumPicked += float64(inflight[e.pod])
			sumOthers += float64(total-inflight[e.pod]) / float64(len(pods)-1)
			n++
		}
		inflight[e.pod]++
		total++
	}
	if n == 0 {
		return nan(), nan()
	}
	return sumPicked / float64(n), sumOthers / float64(n)
}

// fmtJoinedLoad is joinedLoad for the report.
func fmtJoinedLoad(spans []span) string {
	p, o := joinedLoad(spans)
	return fmt.Sprintf("a request joins %.1f in flight on its pod, %.1f on each other pod (%+.1f%%)", p, o, 100*(p/o-1))
}

func nan() float64 { return math.NaN() }
