package server

import (
	"fmt"
	"math"
	"sync"
)

// FailMode is how an injected failure shows.
type FailMode string

const (
	// FailStatus answers HTTP 500 before any token.
	FailStatus FailMode = "status"
	// FailMidstream stops after half the tokens: a stream gets vLLM's error event and [DONE], a
	// non-streamed request HTTP 500.
	FailMidstream FailMode = "midstream"
	// FailDisconnect drops the connection after half the tokens.
	FailDisconnect FailMode = "disconnect"
)

// ParseFailMode checks a --fail-mode value.
func ParseFailMode(s string) (FailMode, error) {
	switch m := FailMode(s); m {
	case FailStatus, FailMidstream, FailDisconnect:
		return m, nil
	}
	return "", fmt.Errorf("fail mode %q is not one of status, midstream, disconnect", s)
}

// failer picks which requests fail: exactly a rate share of any run of requests, spread evenly
// (request n fails when floor(n*rate) steps up), so a test sees the share without randomness.
type failer struct {
	rate float64
	mu   sync.Mutex
	n    uint64
}

func (f *failer) next() bool {
	if f.rate <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return math.Floor(float64(f.n)*f.rate) > math.Floor(float64(f.n-1)*f.rate)
}
