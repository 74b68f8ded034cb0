package warmpool

import (
	"reflect"
	"testing"
	"time"
)

func TestTarget(t *testing.T) {
	tests := []struct {
		max, pct, want int32
	}{
		{10, 20, 2}, {50, 20, 10}, {10, 15, 2}, {3, 10, 1}, {10, 0, 0}, {0, 50, 0}, {10, 150, 10}, {-1, 20, 0},
	}
	for _, tt := range tests {
		if got := Target(tt.max, tt.pct); got != tt.want {
			t.Errorf("Target(%d, %d) = %d, want %d", tt.max, tt.pct, got, tt.want)
		}
	}
}

func TestTransition(t *testing.T) {
	tests := []struct {
		from, to State
		ok       bool
	}{
		{Idle, Warm, true}, {Warm, Serving, true}, {Serving, Draining, true}, {Draining, Idle, true},
		{Idle, Serving, true}, {Serving, Warm, true},
		{Draining, Serving, false}, {Idle, Draining, false}, {Warm, Idle, false}, {Draining, Warm, false},
	}
	for _, tt := range tests {
		got, err := Transition(tt.from, tt.to)
		if (err == nil) != tt.ok {
			t.Errorf("Transition(%s, %s) err = %v, want ok=%v", tt.from, tt.to, err, tt.ok)
		}
		if tt.ok && got != tt.to || !tt.ok && got != tt.from {
			t.Errorf("Transition(%s, %s) = %s", tt.from, tt.to, got)
		}
	}
	if _, err := ParseState("bogus"); err == nil {
		t.Error("ParseState(bogus) succeeded")
	}
	if s, err := ParseState("warm"); err != nil || s != Warm {
		t.Errorf("ParseState(warm) = %s, %v", s, err)
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pod(name string, s State, ready bool, ageSec int) Pod {
	return Pod{Name: name, State: s, Ready: ready, Created: t0.Add(-time.Duration(ageSec) * time.Second)}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want Plan
	}{
		{
			name: "empty pool fills serving and warm at once",
			in:   Input{Desired: 2, WarmTarget: 2, UseWarmPool: true, BatchSize: 1, Delay: 30 * time.Second, Now: t0},
			want: Plan{CreateServing: 2, CreateWarm: 2},
		},
		{
			name: "steady state does nothing",
			in: Input{Desired: 2, WarmTarget: 2, UseWarmPool: true, Now: t0, Pods: []Pod{
				pod("a", Serving, true, 10), pod("b", Serving, true, 10), pod("c", Warm, true, 10), pod("d", Warm, true, 10)}},
			want: Plan{},
		},
		{
			name: "scale up activates ready warm pods first, replenish waits for the delay",
			in: Input{Desired: 4, WarmTarget: 2, UseWarmPool: true, Delay: 30 * time.Second, BatchSize: 1, Now: t0, Pods: []Pod{
				pod("a", Serving, true, 10), pod("b", Serving, true, 10), pod("w-new", Warm, false, 1), pod("w-old", Warm, true, 10), pod("w-mid", Warm, true, 5)}},
			want: Plan{Activate: []string{"w-old", "w-mid"}, RequeueAfter: 30 * time.Second},
		},
		{
			name: "scale up beyond warm pool creates cold serving pods",
			in: Input{Desired: 5, WarmTarget: 2, UseWarmPool: true, Delay: 10 * time.Second, BatchSize: 1, Now: t0, Pods: []Pod{
				pod("a", Serving, true, 10), pod("w1", Warm, true, 10), pod("w2", Warm, true, 9)}},
			want: Plan{Activate: []string{"w1", "w2"}, CreateServing: 2, RequeueAfter: 10 * time.Second},
		},
		{
			name: "without useWarmPool no activation and warm pods are trimmed",
			in: Input{Desired: 3, WarmTarget: 2, UseWarmPool: false, Now: t0, Pods: []Pod{
				pod("a", Serving, true, 10), pod("w1", Warm, true, 10)}},
			want: Plan{CreateServing: 2, Trim: []string{"w1"}},
		},
		{
			name: "replenish after delay is batched",
			in: Input{Desired: 4, WarmTarget: 3, UseWarmPool: true, Delay: 30 * time.Second, BatchSize: 2, LastActivation: t0.Add(-31 * time.Second), Now: t0, Pods: []Pod{
				pod("a", Serving, true, 50), pod("b", Serving, true, 50), pod("c", Serving, true, 50), pod("d", Serving, true, 50)}},
			want: Plan{CreateWarm: 2},
		},
		{
			name: "replenish counts starting warm pods against the batch",
			in: Input{Desired: 1, WarmTarget: 3, UseWarmPool: true, Delay: 30 * time.Second, BatchSize: 2, LastActivation: t0.Add(-60 * time.Second), Now: t0, Pods: []Pod{
				pod("a", Serving, true, 50), pod("w1", Warm, false, 1)}},
			want: Plan{CreateWarm: 1},
		},
		{
			name: "replenish before delay requeues",
			in: Input{Desired: 1, WarmTarget: 1, UseWarmPool: true, Delay: 30 * time.Second, BatchSize: 1, LastActivation: t0.Add(-10 * time.Second), Now: t0, Pods: []Pod{
				pod("a", Serving, true, 50)}},
			want: Plan{RequeueAfter: 20 * time.Second},
		},
		{
			name: "scale down drains not-ready then newest serving pods",
			in: Input{Desired: 1, WarmTarget: 0, UseWarmPool: true, Now: t0, Pods: []Pod{
				pod("old", Serving, true, 100), pod("new", Serving, true, 1), pod("sick", Serving, false, 200)}},
			want: Plan{Drain: []string{"new", "sick"}},
		},
		{
			name: "terminating and draining pods are not counted",
			in: Input{Desired: 1, WarmTarget: 1, UseWarmPool: true, Now: t0, Pods: []Pod{
				{Name: "gone", State: Serving, Ready: true, Terminating: true}, pod("d", Draining, true, 5), pod("w", Warm, true, 5)}},
			want: Plan{Activate: []string{"w"}, CreateWarm: 1}, // zero delay: replenish at once
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.in)
			if !reflect.DeepEqual(normalize(got), normalize(tt.want)) {
				t.Fatalf("Decide() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func normalize(p Plan) Plan {
	if len(p.Activate) == 0 {
		p.Activate = nil
	}
	if len(p.Drain) == 0 {
		p.Drain = nil
	}
	if len(p.Trim) == 0 {
		p.Trim = nil
	}
	return p
}

// TestDecideNeverExceedsBound replays rounds where the plan is applied and checks the invariant
// that non-terminating pods never exceed Desired + WarmTarget.
func TestDecideNeverExceedsBound(t *testing.T) {
	for desired := int32(0); desired <= 6; desired++ {
		for warmHave := 0; warmHave <= 4; warmHave++ {
			for servHave := 0; servHave <= 6; servHave++ {
				var pods []Pod
				for i := range servHave {
					pods = append(pods, pod("s"+string(rune('a'+i)), Serving, true, i))
				}
				for i := range warmHave {
					pods = append(pods, pod("w"+string(rune('a'+i)), Warm, i%2 == 0, i))
				}
				in := Input{Desired: desired, WarmTarget: 2, UseWarmPool: true, BatchSize: 1, Delay: time.Second, Now: t0, Pods: pods}
				p := Decide(in)
				total := int32(len(pods)) + p.CreateServing + p.CreateWarm - int32(len(p.Drain)) - int32(len(p.Trim))
				if total > desired+2 {
					t.Fatalf("desired=%d serving=%d warm=%d: plan %+v leaves %d pods", desired, servHave, warmHave, p, total)
				}
				serving := int32(servHave) + int32(len(p.Activate)) + p.CreateServing - int32(len(p.Drain))
				if serving != desired {
					t.Fatalf("desired=%d serving=%d warm=%d: plan %+v leaves %d serving", desired, servHave, warmHave, p, serving)
				}
			}
		}
	}
}
