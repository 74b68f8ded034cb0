// Package binding is the Kubernetes side of the dispatcher: it turns ToolBindings into running
// consumers (one per dispatched queue binding and replica), keeps them in step with the
// bindings, their AgentPools and AgentClasses, and reports each binding's Ready and Degraded
// conditions and counters, agreed by every replica through Redis.
package binding

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/backoff"
	"github.com/neuronetes/neuronetes/dispatcher/worker"
)

// Defaults of spec.queueConfig.dispatch.
const (
	DefaultMaxRetries     = 3
	DefaultTimeout        = 60 * time.Second
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultDedupeTTL      = 24 * time.Hour
	// DefaultLease is the dedupe lease; it is renewed every third of it while a message is
	// worked on, so it only bounds how long a dead replica's messages wait.
	DefaultLease = 15 * time.Second
)

// Spec is a dispatched queue binding resolved against its pool and class.
type Spec struct {
	// Key is the binding.
	Key types.NamespacedName
	// Provider, URL, Queue and Group address the queue.
	Provider, URL, Queue, Group string
	// Pool is the bound AgentPool's name.
	Pool string
	// AgentClass is the pool's class (the agent_class metric label).
	AgentClass string
	// Prefetch is queueConfig.prefetchCount (messages per ready pool replica).
	Prefetch int
	// Worker is the per-message configuration.
	Worker worker.Config
}

// DefaultGroup is the consumer group of a binding that names none.
func DefaultGroup(ns, name string) string { return "neuronetes-" + ns + "-" + name }

// Dispatched reports whether the dispatcher consumes b.
func Dispatched(b *v1alpha1.ToolBinding) bool {
	return b.Spec.Type == "queue" && b.Spec.QueueConfig != nil && b.Spec.QueueConfig.Dispatch != nil
}

// ModelOf is the model id the gateway serves a pool's class under: the class's modelRef name,
// else the class's name (docs/gateway.md, "Models, pools and endpoints").
func ModelOf(class *v1alpha1.AgentClass) string {
	if class.Spec.ModelRef != nil && class.Spec.ModelRef.Name != "" {
		return class.Spec.ModelRef.Name
	}
	return class.Name
}

// ClassOf is the AgentClass name of a pool (its agentClassRef, else the pool's own name).
func ClassOf(pool *v1alpha1.AgentPool) string {
	if pool.Spec.AgentClassRef != nil && pool.Spec.AgentClassRef.Name != "" {
		return pool.Spec.AgentClassRef.Name
	}
	return pool.Name
}

// FieldError is an invalid or unresolvable spec field.
type FieldError struct {
	// Field is the path, e.g. spec.queueConfig.dispatch.maxBackoff.
	Field string
	// Reason is the condition reason.
	Reason string
	// Msg says what is wrong.
	Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func duration(field string, d v1alpha1.Duration, def time.Duration) (time.Duration, error) {
	if d == "" {
		return def, nil
	}
	v, err := d.Parse()
	if err != nil || v <= 0 {
		return 0, &FieldError{Field: field, Reason: "InvalidSpec", Msg: fmt.Sprintf("%q is not a positive duration", d)}
	}
	return v, nil
}

// Resolve checks a dispatched binding and resolves it with its class (nil when missing).
func Resolve(b *v1alpha1.ToolBinding, pool *v1alpha1.AgentPool, class *v1alpha1.AgentClass) (Spec, error) {
	q := b.Spec.QueueConfig
	if !Dispatched(b) {
		return Spec{}, &FieldError{Field: "spec.queueConfig.dispatch", Reason: "InvalidSpec", Msg: "not a dispatched queue binding"}
	}
	d := q.Dispatch
	if b.Spec.AgentPoolRef == nil || b.Spec.AgentPoolRef.Name == "" {
		return Spec{}, &FieldError{Field: "spec.agentPoolRef", Reason: "InvalidSpec", Msg: "required with queueConfig.dispatch"}
	}
	if q.Provider == "sqs" {
		return Spec{}, &FieldError{Field: "spec.queueConfig.provider", Reason: "ProviderNotSupported", Msg: "sqs is not supported yet"}
	}
	if pool == nil {
		return Spec{}, &FieldError{Field: "spec.agentPoolRef.name", Reason: "PoolNotFound", Msg: fmt.Sprintf("AgentPool %q not found", b.Spec.AgentPoolRef.Name)}
	}
	if class == nil {
		return Spec{}, &FieldError{Field: "spec.agentPoolRef.name", Reason: "ModelUnresolved", Msg: fmt.Sprintf("AgentClass %q of AgentPool %q not found: no model to request", ClassOf(pool), pool.Name)}
	}
	s := Spec{Key: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, Provider: q.Provider, URL: q.URL, Queue: q.QueueName,
		Group: q.ConsumerGroup, Pool: pool.Name, AgentClass: class.Name, Prefetch: 1}
	if s.Group == "" {
		s.Group = DefaultGroup(b.Namespace, b.Name)
	}
	if q.PrefetchCount != nil {
		s.Prefetch = int(*q.PrefetchCount)
	}
	w := worker.Config{Binding: b.Namespace + "/" + b.Name, Model: ModelOf(class), Pool: b.Namespace + "/" + pool.Name, ResponseQueue: d.ResponseQueue,
		DeadLetterQueue: d.DeadLetterQueue, MaxRetries: DefaultMaxRetries, SessionKeyField: d.SessionKeyField, Lease: DefaultLease}
	if d.MaxRetries != nil {
		w.MaxRetries = int(*d.MaxRetries)
	}
	var err error
	base := "spec.queueConfig.dispatch."
	if w.Timeout, err = duration(base+"timeout", d.Timeout, DefaultTimeout); err != nil {
		return Spec{}, err
	}
	if w.Backoff.Initial, err = duration(base+"initialBackoff", d.InitialBackoff, DefaultInitialBackoff); err != nil {
		return Spec{}, err
	}
	if w.Backoff.Max, err = duration(base+"maxBackoff", d.MaxBackoff, DefaultMaxBackoff); err != nil {
		return Spec{}, err
	}
	if w.Backoff.Max < w.Backoff.Initial {
		return Spec{}, &FieldError{Field: base + "maxBackoff", Reason: "InvalidSpec", Msg: fmt.Sprintf("%s is below initialBackoff %s", w.Backoff.Max, w.Backoff.Initial)}
	}
	if w.DedupeTTL, err = duration(base+"dedupeTTL", d.DedupeTTL, DefaultDedupeTTL); err != nil {
		return Spec{}, err
	}
	// A record must outlive every redelivery of its message: the attempts with their backoffs.
	if floor := time.Duration(w.MaxRetries+1)*(w.Timeout+w.Backoff.Max) + w.Lease; w.DedupeTTL < floor {
		return Spec{}, &FieldError{Field: base + "dedupeTTL", Reason: "InvalidSpec", Msg: fmt.Sprintf("%s is shorter than the attempts can take (%s: (maxRetries+1) x (timeout+maxBackoff) + %s lease)", w.DedupeTTL, floor, w.Lease)}
	}
	w.Backoff = backoff.Schedule{Initial: w.Backoff.Initial, Max: w.Backoff.Max, HalfJitter: true}
	s.Worker = w
	return s, nil
}

// AckWait is how long a delivered message stays with a replica that stops renewing it: long
// enough that a live replica's renewals (every third of it) always arrive, short enough that a
// dead replica's messages move on soon.
func (s Spec) AckWait() time.Duration { return s.Worker.Lease + 5*time.Second }
