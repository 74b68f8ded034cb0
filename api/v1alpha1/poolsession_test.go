package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestPoolSessionName: the name is deterministic, at most 50 characters, a DNS subdomain that
// starts with the pool's name (cut), and differs by pool and by key, also for pools whose names
// share the cut prefix.
func TestPoolSessionName(t *testing.T) {
	long := strings.Repeat("a", 40)
	for _, tc := range []struct {
		name, pool, key, prefix string
	}{
		{"short pool", "chat", "0123456789abcdef0123456789abcdef", "chat-"},
		{"pool of 33", strings.Repeat("b", 33), "k", strings.Repeat("b", 33) + "-"},
		{"long pool cut", long, "k", strings.Repeat("a", 33) + "-"},
		{"cut at a dash", strings.Repeat("c", 32) + "-dd", "k", strings.Repeat("c", 32) + "-"},
		{"dotted pool", "team.chat", "k", "team.chat-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := PoolSessionName(tc.pool, tc.key)
			if n != PoolSessionName(tc.pool, tc.key) {
				t.Fatal("not deterministic")
			}
			if len(n) > 50 {
				t.Errorf("%q has %d characters", n, len(n))
			}
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("%q: %v", n, errs)
			}
			if !strings.HasPrefix(n, tc.prefix) || len(n) != len(tc.prefix)+PoolSessionHashLen {
				t.Errorf("%q, want %q and %d hex characters", n, tc.prefix, PoolSessionHashLen)
			}
			if n == PoolSessionName(tc.pool, tc.key+"x") {
				t.Error("another key gives the same name")
			}
			if n == PoolSessionName(tc.pool+"x", tc.key) {
				t.Error("another pool gives the same name")
			}
		})
	}
	// Length-prefixed fields: ("ab","c") and ("a","bc") differ.
	if PoolSessionName("ab", "c")[3:] == PoolSessionName("a", "bc")[2:] {
		t.Error("field boundaries are not hashed")
	}
}
