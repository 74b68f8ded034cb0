package v1alpha1

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSessionActivity(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	status := metav1.NewTime(t0)
	for _, tc := range []struct {
		name   string
		status *metav1.Time
		ann    string
		want   time.Time
	}{
		{name: "neither"},
		{name: "status only", status: &status, want: t0},
		{name: "annotation only", ann: t0.Add(time.Minute).Format(time.RFC3339Nano), want: t0.Add(time.Minute)},
		{name: "annotation later", status: &status, ann: t0.Add(time.Second).Format(time.RFC3339Nano), want: t0.Add(time.Second)},
		{name: "annotation earlier", status: &status, ann: t0.Add(-time.Hour).Format(time.RFC3339Nano), want: t0},
		{name: "annotation unparsable", status: &status, ann: "yesterday", want: t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &AgentSession{}
			s.Status.LastActivity = tc.status
			if tc.ann != "" {
				s.Annotations = map[string]string{SessionLastActivityAnnotation: tc.ann}
			}
			if got := s.Activity(); !got.Equal(tc.want) {
				t.Fatalf("Activity() = %v, want %v", got, tc.want)
			}
		})
	}
}
