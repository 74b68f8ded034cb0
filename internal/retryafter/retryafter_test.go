package retryafter

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"7", 7 * time.Second, true},
		{" 0 ", 0, true},
		{"-3", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"Wed, 02 Dec 2026 16:00:30 GMT", 30 * time.Second, true},
		{"Wednesday, 02-Dec-26 16:01:00 GMT", time.Minute, true},
		{"Wed Dec  2 16:00:05 2026", 5 * time.Second, true},
		{"Wed, 02 Dec 2026 15:00:00 GMT", 0, true},
		{"99999999999", 366 * 24 * time.Hour, true},
	} {
		got, ok := Parse(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
