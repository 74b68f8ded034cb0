package testreq

import (
	"fmt"
	"strings"
	"testing"
)

// recorder records how a helper stopped the test instead of stopping it.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.failed = sprintf(format, args...) }
func (r *recorder) Skip(args ...any)                  { r.skipped = sprint(args...) }

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, ci, strict, gpu string
		call                  func(testing.TB)
		wantFail              bool
	}{
		{"tool, developer machine", "", "", "", toolCall, false},
		{"tool, CI=true", "true", "", "", toolCall, true},
		{"tool, CI=1", "1", "", "", toolCall, true},
		{"tool, make test", "", "1", "", toolCall, true},
		{"tool, CI=true but strict off", "true", "0", "", toolCall, false},
		{"tool, CI=false", "false", "", "", toolCall, false},
		{"gpu, CI=true", "true", "", "", gpuCall, false},
		{"gpu, strict", "", "1", "", gpuCall, false},
		{"gpu, required", "true", "", "1", gpuCall, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvStrict, tc.strict)
			t.Setenv(EnvRequireGPU, tc.gpu)
			r := &recorder{TB: t}
			tc.call(r)
			if got := r.failed != ""; got != tc.wantFail {
				t.Fatalf("failed = %q, skipped = %q; want fail %v", r.failed, r.skipped, tc.wantFail)
			}
			if (r.failed == "") == (r.skipped == "") {
				t.Fatalf("exactly one of fail/skip: failed = %q, skipped = %q", r.failed, r.skipped)
			}
			msg := r.failed + r.skipped
			if !strings.HasPrefix(msg, "needs ") || !strings.Contains(msg, "detail 7") {
				t.Fatalf("message %q: want \"needs <what>: ...\" with the detail", msg)
			}
		})
	}
}

func toolCall(t testing.TB) { Tool(t, "redis-server", "detail %d", 7) }
func gpuCall(t testing.TB)  { GPU(t, "detail %d", 7) }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
func sprint(args ...any) string                 { return fmt.Sprint(args...) }
