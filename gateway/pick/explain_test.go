package pick

import (
	"reflect"
	"testing"
)

// TestConsideredRoundTrip: what the gateway logs of a decision reads back as it was.
func TestConsideredRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		in   []Considered
		text string
	}{
		{"none", nil, ""},
		{"one under the bound", []Considered{{Pod: "127.0.0.1:8001", Backlog: 10, Uncached: 20, Rate: 300}}, "127.0.0.1:8001=10+20@300"},
		{"over the bound, no rate", []Considered{{Pod: "a", Backlog: 0, Uncached: 5}, {Pod: "b", Backlog: 7, Uncached: 0, OverBound: true}},
			"a=0+5@0;b=7+0@0!"},
	}
	for _, c := range cases {
		text := FormatConsidered(c.in)
		if text != c.text {
			t.Errorf("%s: formatted %q, want %q", c.name, text, c.text)
		}
		back, err := ParseConsidered(text)
		if err != nil || !reflect.DeepEqual(back, c.in) {
			t.Errorf("%s: read back %+v (%v), want %+v", c.name, back, err, c.in)
		}
	}
	for _, bad := range []string{"a", "a=1@2", "a=1+2", "a=x+2@3", "a=1+y@3", "a=1+2@z"} {
		if _, err := ParseConsidered(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestPickExplains: with Explain set, the choice lists every candidate as the picker saw it, the
// one over the load bound marked; without it, nothing.
func TestPickExplains(t *testing.T) {
	p := testPool(2)
	l := NewLoad()
	pk := &Picker{Load: l}
	for range 3 { // pod-0 holds 3 of 3 in flight: over ceil(1.25*4/2) = 3
		l.Acquire(p.Ref, "pod-0", 100, 50)
	}
	ch, ok := pk.Pick(p, Input{PromptTokens: 40, Explain: true})
	if !ok || ch.Pod != "pod-1" {
		t.Fatalf("picked %s (%v), want pod-1", ch.Pod, ok)
	}
	want := []Considered{{Pod: "pod-0", Backlog: 150, Uncached: 40, OverBound: true}, {Pod: "pod-1", Uncached: 40}}
	if !reflect.DeepEqual(ch.Considered, want) {
		t.Fatalf("considered %+v, want %+v", ch.Considered, want)
	}
	if ch, _ := pk.Pick(p, Input{PromptTokens: 40}); ch.Considered != nil {
		t.Fatalf("considered %+v without Explain", ch.Considered)
	}
}
