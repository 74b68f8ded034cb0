// Package dedupe keeps one record per queued message so that the dispatcher processes each
// message id once even when the broker delivers it again (after a crash, a rebalance or an ack
// that was lost).
//
// A record moves through these states; every transition is one atomic step in the store and,
// except Begin, is fenced by the lease: a replica whose lease was taken over gets ErrLeaseLost
// and must drop the message without publishing anything.
//
//	(none) --Begin--> processing --SaveOutcome--> result | dead-pending --Finish--> done | dead
//	                      ^   |
//	                      +---+ Fail (failure counted, last error kept)
//
// Begin on a done or dead record tells the caller to acknowledge without processing. Begin on a
// result or dead-pending record hands back the stored outcome, so that a replica that took over
// publishes what was already computed instead of running the agent again. Begin while another
// replica's lease is live answers Busy with the time left.
package dedupe

import (
	"context"
	"errors"
	"time"
)

// State of a record.
type State string

// States.
const (
	// Acquired: the caller holds the lease and must process the message.
	Acquired State = "acquired"
	// Busy: another replica holds a live lease.
	Busy State = "busy"
	// Result: a result is stored and may not have been published; publish it, then Finish.
	Result State = "result"
	// DeadPending: a dead letter is stored and may not have been published.
	DeadPending State = "dead-pending"
	// Done: the result was published; acknowledge.
	Done State = "done"
	// Dead: the message was dead-lettered; acknowledge.
	Dead State = "dead"
)

// ErrLeaseLost means another replica owns the message now.
var ErrLeaseLost = errors.New("dedupe: lease lost to another replica")

// Record is what Begin found.
type Record struct {
	// State decides what the caller does.
	State State
	// Failures is the number of failed attempts recorded so far.
	Failures int
	// Starts is the number of attempts started (interrupted ones included).
	Starts int
	// LastError is the last recorded failure.
	LastError string
	// Outcome is the stored result or dead letter (Result, DeadPending).
	Outcome []byte
	// Meta is the stored outcome's metadata (headers), as the caller saved it.
	Meta []byte
	// Saved is when the outcome was stored.
	Saved time.Time
	// Wait is the time left on another replica's lease (Busy).
	Wait time.Duration
}

// Store is the record store. Keys are scoped by a binding (namespace/name) and a message id.
type Store interface {
	// Begin takes the lease on the message for lease and extends the record's life to ttl.
	Begin(ctx context.Context, binding, id, owner string, lease, ttl time.Duration) (Record, error)
	// StartAttempt counts an attempt (fenced) and returns the number started.
	StartAttempt(ctx context.Context, binding, id, owner string) (int, error)
	// Renew extends the caller's lease (fenced).
	Renew(ctx context.Context, binding, id, owner string, lease time.Duration) error
	// Fail records a failed attempt and its error (fenced) and returns the failures so far.
	Fail(ctx context.Context, binding, id, owner, msg string) (int, error)
	// SaveOutcome stores a result (state Result) or a dead letter (DeadPending) before it is
	// published (fenced).
	SaveOutcome(ctx context.Context, binding, id, owner string, state State, outcome, meta []byte) error
	// Finish marks the outcome published (Done or Dead), drops the stored outcome, releases the
	// lease and keeps the record for ttl (fenced).
	Finish(ctx context.Context, binding, id, owner string, state State, ttl time.Duration) error
	// Release gives the lease up without changing the state (e.g. at shutdown).
	Release(ctx context.Context, binding, id, owner string) error
	// Count adds to the binding's shared counters (status.dispatch).
	Count(ctx context.Context, binding string, deltas map[string]int64) error
	// Counters reads them.
	Counters(ctx context.Context, binding string) (map[string]int64, error)
}
