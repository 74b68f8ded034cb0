package rollout

import (
	"testing"

	"github.com/neuronetes/neuronetes/gateway/stage"
)

// TestFailed: what counts against a variant. A client that went away is its own choice, so a
// client cannot force a rollback by disconnecting.
func TestFailed(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    stage.Outcome
		want bool
	}{
		{"success", stage.Outcome{Status: 200}, false},
		{"5xx", stage.Outcome{Status: 502, Err: "backend error"}, true},
		{"stream broke after start", stage.Outcome{Status: 200, Err: "backend stream failed"}, true},
		{"client error", stage.Outcome{Status: 400, Err: "bad"}, false},
		{"client went away before the answer", stage.Outcome{Status: 499, Err: "client closed", Cancelled: true}, false},
		{"client went away mid-stream", stage.Outcome{Status: 499, Err: "client gone", Cancelled: true}, false},
	} {
		if got := failed(tc.o); got != tc.want {
			t.Errorf("%s: failed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
