package e2e

// Unit tests of the pool recorder's arithmetic (no cluster needed).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func recPod(name, uid string, created time.Time, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created)},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func TestPoolRecorderColdStart(t *testing.T) {
	start := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	r := &poolRecorder{start: start, firstSeen: map[types.UID]float64{}, readyAt: map[types.UID]float64{},
		createdAfterStart: map[types.UID]bool{}}
	old := recPod("sim-0", "a", start.Add(-time.Minute), true)
	// Samples 2 s apart (a slow apiserver): the pool scales 1 -> 2 at 10 s, pod sim-1 (uid b)
	// is Ready at 22 s, is removed at 30 s (2 -> 1), and the slot's name comes back as a new pod
	// (uid c) after the rise at 60 s, Ready at 70 s; a rise at 80 s brings sim-2 (uid d), Ready
	// at 94 s.
	steps := []struct {
		t        float64
		replicas float64
		pods     []corev1.Pod
	}{
		{0, 1, []corev1.Pod{old}},
		{10, 2, []corev1.Pod{old, recPod("sim-1", "b", at(10), false)}},
		{20, 2, []corev1.Pod{old, recPod("sim-1", "b", at(10), false)}},
		{22, 2, []corev1.Pod{old, recPod("sim-1", "b", at(10), true)}},
		{30, 1, []corev1.Pod{old}},
		{60, 2, []corev1.Pod{old, recPod("sim-1", "c", at(60), false)}},
		{70, 2, []corev1.Pod{old, recPod("sim-1", "c", at(60), true)}},
		{80, 3, []corev1.Pod{old, recPod("sim-1", "c", at(60), true), recPod("sim-2", "d", at(80), false)}},
		{94, 3, []corev1.Pod{old, recPod("sim-1", "c", at(60), true), recPod("sim-2", "d", at(80), true)}},
	}
	for _, s := range steps {
		r.addReplicas(s.t, s.replicas)
		r.addPods(s.t, s.pods)
	}
	// 12, 10 and 14 s: the median is 12 s; the pod there before the recording does not count.
	got, n := r.coldStart()
	if n != 3 || got != 12*time.Second {
		t.Fatalf("coldStart = %v of %d pods, want 12s of 3", got, n)
	}
}

func TestPerSecond(t *testing.T) {
	tests := []struct {
		name          string
		at, v         []float64
		d             float64
		want          []float64
		integral, max float64
	}{
		{"one sample a second", []float64{0, 1, 2}, []float64{1, 2, 3}, 3, []float64{1, 2, 3}, 6, 3},
		{"slow samples hold their value", []float64{0.4, 2.5}, []float64{1, 4}, 4, []float64{1, 1, 1, 4}, 7, 4},
		{"no samples", nil, nil, 3, nil, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, integral, peak := perSecond(tc.at, tc.v, tc.d)
			if len(out) != len(tc.want) || integral != tc.integral || peak != tc.max {
				t.Fatalf("perSecond = %v, %v, %v; want %v, %v, %v", out, integral, peak, tc.want, tc.integral, tc.max)
			}
			for i := range out {
				if out[i] != tc.want[i] {
					t.Fatalf("perSecond = %v, want %v", out, tc.want)
				}
			}
		})
	}
}

// TestFailureKind checks how TestAutoscalerMatchesSimulator names a failed request's kind.
func TestFailureKind(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		name   string
		status int
		body   string
		err    error
		want   string
	}{
		{"the gateway's error answer", 504, `{"error":{"message":"x","type":"timeout","code":"backend_timeout"}}`, nil, "status 504 backend_timeout"},
		{"an answer without a code: its type", 503, `{"error":{"type":"service_unavailable"}}`, nil, "status 503 service_unavailable"},
		{"an error event in a stream", 200, `data: {"error":{"code":"backend_unreachable"}}`, nil, "stream error event backend_unreachable"},
		{"a stream that ended without a token", 200, ``, nil, "stream ended without a token"},
		{"a transport timeout", 0, ``, timeout, "transport timeout"},
		{"a reset connection", 0, ``, errors.New("read: connection reset by peer"), "transport connection reset"},
		{"EOF", 0, ``, fmt.Errorf("post: %w", io.EOF), "transport EOF"},
	} {
		if got := failureKind(c.status, errorCode([]byte(c.body)), c.err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
