package scalesim

// Routing says where a request waits until a replica prefills it.
type Routing int

const (
	// RoutePool keeps one pool-wide FIFO queue: a serving replica takes the
	// next request when it has a free slot and its prefill engine is idle, as
	// behind a gateway that holds requests until an endpoint has capacity.
	RoutePool Routing = iota
	// RouteLeastPrefill routes each request at its arrival to the serving
	// replica with the fewest prompt tokens ahead of its first token (queued
	// plus the rest of the prefill running), fewer requests and then the older
	// replica breaking ties; it waits in that replica's own FIFO queue, which
	// the replica serves to the end even while draining. This is the
	// NeuroNetes gateway forwarding at once by its prefill scorer, with the
	// model server queueing in the pod: a replica that becomes ready takes new
	// requests only, never the backlog of the others. Requests that arrive
	// while no replica serves wait in the pool until one does.
	RouteLeastPrefill
)

// String names the routing for reports.
func (r Routing) String() string {
	if r == RouteLeastPrefill {
		return "least-prefill"
	}
	return "pool"
}

// Sessions says what the concurrent-sessions metric counts. The controller
// reads the first name a pod exports: neuronetes_concurrent_sessions, then
// vllm:num_requests_running (docs/autoscaling.md, Metrics).
type Sessions int

const (
	// SessionsRunning counts running sequences (prefilling or decoding), as
	// vllm:num_requests_running gives them for servers that do not export
	// neuronetes_concurrent_sessions.
	SessionsRunning Sessions = iota
	// SessionsConversations counts the conversations active in the last 5
	// minutes, as neuronetes_concurrent_sessions does (the demo agent exports
	// it). A trace's requests carry no conversation id, and a request without
	// one opens no conversation, so the metric reads 0, as the demo agent's
	// gauge does for such requests.
	SessionsConversations
)

// route hands the pool's waiting requests, in arrival order, to the serving
// replicas (RouteLeastPrefill).
func (c *cluster) route() {
	for len(c.queue) > 0 {
		var best *replica
		var bestTok float64
		var bestReqs int
		for _, r := range c.reps {
			if r.st != serving {
				continue
			}
			tok, reqs := r.ahead()
			if best == nil || tok < bestTok || (tok == bestTok && reqs < bestReqs) {
				best, bestTok, bestReqs = r, tok, reqs
			}
		}
		if best == nil {
			return
		}
		best.queue = append(best.queue, c.queue[0])
		c.queue = c.queue[1:]
	}
}

// ahead is the replica's prompt tokens not yet prefilled (queued and in its
// prefill engine) and its requests (queued and running).
func (r *replica) ahead() (tokens float64, reqs int) {
	for _, j := range r.queue {
		tokens += j.remaining
	}
	reqs = len(r.queue) + len(r.decodes)
	if r.prefill != nil {
		tokens += r.prefill.remaining
		reqs++
	}
	return tokens, reqs
}
