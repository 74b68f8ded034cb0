package main

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// fakeCustom is a CustomSchedulerPlugin that admits nodes labelled ok=true and scores a fixed value.
type fakeCustom struct{ score int64 }

func (fakeCustom) Name() string { return "Fake" }

func (fakeCustom) Filter(_ context.Context, _ *v1.Pod, n *v1.Node) bool {
	return n.Labels["ok"] == "true"
}

func (f fakeCustom) Score(context.Context, *v1.Pod, *v1.Node) int64 { return f.score }

// TestCustomPlugin: the adapter turns a false Filter into Unschedulable naming the plugin, passes
// a true one, and clamps Score to the framework's 0..100.
func TestCustomPlugin(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ok        string
		score     int64
		wantCode  fwk.Code
		wantScore int64
	}{
		{"admitted", "true", 42, fwk.Success, 42},
		{"rejected", "false", 42, fwk.Unschedulable, 42},
		{"score above max", "true", 250, fwk.Success, 100},
		{"score below min", "true", -5, fwk.Success, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := newCustom(fakeCustom{score: tc.score})(context.Background(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ni := framework.NewNodeInfo()
			ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"ok": tc.ok}}})
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
			st := pl.(fwk.FilterPlugin).Filter(context.Background(), nil, pod, ni)
			if st.Code() != tc.wantCode {
				t.Errorf("Filter = %v, want code %v", st, tc.wantCode)
			}
			if tc.wantCode == fwk.Unschedulable && !strings.Contains(st.Message(), "Fake") {
				t.Errorf("Filter message %q does not name the plugin", st.Message())
			}
			s, st := pl.(fwk.ScorePlugin).Score(context.Background(), nil, pod, ni)
			if !st.IsSuccess() || s != tc.wantScore {
				t.Errorf("Score = %d %v, want %d", s, st, tc.wantScore)
			}
		})
	}
}
