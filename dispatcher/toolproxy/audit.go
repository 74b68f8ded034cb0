package toolproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Entry is one audit record of a tool call. It never holds argument or answer values.
type Entry struct {
	Time       time.Time   `json:"time"`
	RequestID  string      `json:"requestID"`
	Namespace  string      `json:"namespace"`
	Tool       string      `json:"tool"`
	Binding    string      `json:"binding,omitempty"`
	Pool       string      `json:"pool,omitempty"`
	Session    string      `json:"session,omitempty"` // the calling AgentSession, for a session pod
	Pod        string      `json:"pod,omitempty"`     // the caller's; namespace/name of a refused authenticated pod
	Outcome    string      `json:"outcome"`
	Status     int         `json:"status"`
	DurationMs float64     `json:"durationMs"`
	ArgBytes   int         `json:"argumentBytes"`
	RespBytes  int         `json:"responseBytes"`
	Idempotent string      `json:"idempotency,omitempty"` // new, replayed
	Violations []Violation `json:"violations,omitempty"`
	Error      string      `json:"error,omitempty"` // the proxy's own error class, never a tool answer
}

// Audit writes entries as JSON lines and keeps the last ones for GET /audit.
type Audit struct {
	// Out receives one JSON line per entry (optional).
	Out io.Writer
	// Keep is how many entries are served (default 1000).
	Keep int

	mu   sync.Mutex
	ring []Entry
	next int
}

// Record adds an entry.
func (a *Audit) Record(e Entry) {
	b, _ := json.Marshal(e)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Out != nil {
		_, _ = a.Out.Write(append(b, '\n'))
	}
	keep := a.Keep
	if keep <= 0 {
		keep = 1000
	}
	if len(a.ring) < keep {
		a.ring = append(a.ring, e)
		return
	}
	a.ring[a.next] = e
	a.next = (a.next + 1) % keep
}

// Entries returns the kept entries, oldest first.
func (a *Audit) Entries() []Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Entry, 0, len(a.ring))
	out = append(out, a.ring[a.next:]...)
	return append(out, a.ring[:a.next]...)
}

// ServeHTTP serves the kept entries as JSON: ?tool=, ?namespace=, ?outcome= filter, ?limit=
// keeps the newest.
func (a *Audit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var out []Entry
	for _, e := range a.Entries() {
		if (q.Get("tool") == "" || q.Get("tool") == e.Tool) && (q.Get("namespace") == "" || q.Get("namespace") == e.Namespace) &&
			(q.Get("outcome") == "" || q.Get("outcome") == e.Outcome) {
			out = append(out, e)
		}
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 0 && n < len(out) {
		out = out[len(out)-n:]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"entries": out})
}
