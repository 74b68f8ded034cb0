package engine

import (
	"time"

	"github.com/neuronetes/neuronetes/gateway/openai"
)

// usageState is what the request learned of its tokens.
type usageState struct {
	usage     *openai.Usage
	chunks    int // streamed chunks that carried a token
	estimated int // completion tokens estimated from a whole response's text
	accounted bool
	first     bool // the first token (or the whole response) arrived and was recorded
	// firstAt is when a stream's first token arrived, until settleFirstToken records it.
	firstAt time.Time
}

// count folds one chunk (or a whole response) into the request's usage and marks the first
// token.
func (r *request) count(c *openai.Chunk, whole bool) {
	if c.Usage != nil {
		r.usage.usage = c.Usage
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		text := ""
		for _, p := range ch.Pieces() { // content, reasoning and tool-call arguments
			text += p.Text
		}
		tool := ch.Delta != nil && len(ch.Delta.ToolCalls) > 0
		if text == "" && !tool {
			continue
		}
		if whole {
			r.usage.estimated += openai.EstimateTokens(text)
			continue
		}
		r.usage.chunks++
		r.markFirstToken()
	}
}

// markFirstToken notes the first streamed token's arrival once (its TTFT is now);
// settleFirstToken records it after the token left for the client.
func (r *request) markFirstToken() {
	if r.usage.first || !r.usage.firstAt.IsZero() {
		return // every later chunk: no clock read
	}
	r.usage.firstAt = r.e.now()
}

// settleFirstToken records a noted first token: the request leaves the queue views, its lease
// stops counting its prefill, and its TTFT is observed. It runs after the token was sent, as
// these take locks shared by every request of the gateway: a lock held by a goroutine the
// scheduler put aside would otherwise hold back this request's first token too.
func (r *request) settleFirstToken() {
	if r.usage.first || r.usage.firstAt.IsZero() {
		return
	}
	r.firstToken(max(r.usage.firstAt.Sub(r.start), 1), true)
}

// firstToken marks the request's first token once; with observe, ttft is its TTFT for the
// histogram, the pool's p95 and the outcome (a whole response without the backend's own report
// has none).
func (r *request) firstToken(ttft time.Duration, observe bool) {
	if r.usage.first {
		return
	}
	r.usage.first = true
	r.dequeue()
	r.lease.FirstToken()
	if !observe {
		return
	}
	r.out.TTFT = ttft
	s := r.out.TTFT.Seconds()
	r.e.Metrics.TTFT.WithLabelValues(r.pool.AgentClass, r.modelLabel(), string(r.body.Route)).Observe(s)
	r.e.Pools.ObserveTTFT(r.pool.Ref, r.out.Pod, s)
}

// modelLabel is the pool's model id, or the requested one in static mode without a model.
func (r *request) modelLabel() string {
	if r.pool.Model != "" {
		return r.pool.Model
	}
	return r.body.Model
}

// account settles the billed tokens once: the backend's usage when it gave one, else the
// prompt estimate and the counted completion.
func (r *request) account() {
	u := &r.usage
	if u.accounted {
		return
	}
	u.accounted = true
	if u.usage != nil {
		r.out.PromptTokens, r.out.CompletionTokens = u.usage.PromptTokens, u.usage.CompletionTokens
	} else {
		r.out.CompletionTokens = u.chunks + u.estimated
	}
	m, class, model := r.e.Metrics, r.pool.AgentClass, r.modelLabel()
	m.AddTokens(class, model, "input", r.out.PromptTokens)
	m.AddTokens(class, model, "output", r.out.CompletionTokens)
	p := r.pool.Policy
	if cost := float64(r.out.PromptTokens)*p.InputPrice + float64(r.out.CompletionTokens)*p.OutputPrice; cost > 0 {
		m.Cost.WithLabelValues(class, model).Add(cost)
	}
}
