package binding

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func tb(mut func(*v1alpha1.ToolBinding)) *v1alpha1.ToolBinding {
	b := &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tasks"}, Spec: v1alpha1.ToolBindingSpec{
		Type: "queue", AgentPoolRef: &v1alpha1.LocalObjectReference{Name: "pool"},
		QueueConfig: &v1alpha1.QueueConfig{Provider: "nats", QueueName: "TASKS", Dispatch: &v1alpha1.DispatchConfig{ResponseQueue: "results", DeadLetterQueue: "dead"}},
	}}
	if mut != nil {
		mut(b)
	}
	return b
}

func TestResolve(t *testing.T) {
	pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: v1alpha1.AgentPoolSpec{AgentClassRef: &v1alpha1.LocalObjectReference{Name: "chat"}}}
	class := &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Name: "chat"}, Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: "llama"}}}
	three := int32(7)
	for _, tc := range []struct {
		name  string
		mut   func(*v1alpha1.ToolBinding)
		pool  *v1alpha1.AgentPool
		class *v1alpha1.AgentClass
		field string // error field, "" for success
		check func(t *testing.T, s Spec)
	}{
		{"defaults", nil, pool, class, "", func(t *testing.T, s Spec) {
			w := s.Worker
			if s.Group != "neuronetes-ns-tasks" || s.Prefetch != 1 || w.Model != "llama" || s.AgentClass != "chat" || w.MaxRetries != 3 || w.Timeout != time.Minute ||
				w.Backoff.Initial != time.Second || w.Backoff.Max != time.Minute || w.DedupeTTL != 24*time.Hour || w.Binding != "ns/tasks" || w.Pool != "ns/pool" {
				t.Fatalf("resolved %+v", s)
			}
		}},
		{"explicit values", func(b *v1alpha1.ToolBinding) {
			q := b.Spec.QueueConfig
			q.ConsumerGroup, q.PrefetchCount = "g", &three
			q.Dispatch.Timeout, q.Dispatch.InitialBackoff, q.Dispatch.MaxBackoff, q.Dispatch.DedupeTTL = "5s", "100ms", "2s", "1d"
			q.Dispatch.SessionKeyField = "user"
		}, pool, class, "", func(t *testing.T, s Spec) {
			if s.Group != "g" || s.Prefetch != 7 || s.Worker.Timeout != 5*time.Second || s.Worker.Backoff.Max != 2*time.Second || s.Worker.DedupeTTL != 24*time.Hour || s.Worker.SessionKeyField != "user" {
				t.Fatalf("resolved %+v", s)
			}
		}},
		{"class without modelRef serves its name", nil, pool, &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Name: "chat"}}, "", func(t *testing.T, s Spec) {
			if s.Worker.Model != "chat" {
				t.Fatalf("model %q", s.Worker.Model)
			}
		}},
		{"missing pool", nil, nil, nil, "spec.agentPoolRef.name", nil},
		{"missing class", nil, pool, nil, "spec.agentPoolRef.name", nil},
		{"no pool ref", func(b *v1alpha1.ToolBinding) { b.Spec.AgentPoolRef = nil }, pool, class, "spec.agentPoolRef", nil},
		{"max below initial", func(b *v1alpha1.ToolBinding) {
			b.Spec.QueueConfig.Dispatch.MaxBackoff = "1s"
			b.Spec.QueueConfig.Dispatch.InitialBackoff = "3s"
		}, pool, class, "spec.queueConfig.dispatch.maxBackoff", nil},
		{"zero timeout", func(b *v1alpha1.ToolBinding) { b.Spec.QueueConfig.Dispatch.Timeout = "0s" }, pool, class, "spec.queueConfig.dispatch.timeout", nil},
		{"dedupe TTL shorter than the retries", func(b *v1alpha1.ToolBinding) { b.Spec.QueueConfig.Dispatch.DedupeTTL = "1m" }, pool, class, "spec.queueConfig.dispatch.dedupeTTL", nil},
		{"sqs", func(b *v1alpha1.ToolBinding) { b.Spec.QueueConfig.Provider = "sqs" }, pool, class, "spec.queueConfig.provider", nil},
		{"not dispatched", func(b *v1alpha1.ToolBinding) { b.Spec.QueueConfig.Dispatch = nil }, pool, class, "spec.queueConfig.dispatch", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(tb(tc.mut), tc.pool, tc.class)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, s)
				return
			}
			fe, ok := err.(*FieldError)
			if !ok || fe.Field != tc.field || !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("err = %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
}
