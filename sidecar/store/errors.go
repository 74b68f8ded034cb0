// Package store keeps per-conversation session documents in Redis, sealed
// with the frame codec, with versioned compare-and-set writes, per-entry TTL,
// refresh-on-read and an optional coherent near cache.
package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Errors returned by the store; they are wrapped, test with errors.Is.
var (
	// ErrNotFound means the session does not exist (or expired).
	ErrNotFound = errors.New("session not found")
	// ErrConflict means a conditional write named a version that is not current.
	ErrConflict = errors.New("version conflict")
	// ErrUnavailable means Redis could not be reached or is not serving yet.
	ErrUnavailable = errors.New("redis unavailable")
	// ErrTooLarge means a session would exceed the configured size limit.
	ErrTooLarge = errors.New("session too large")
	// ErrBadID means a conversation id or tenant is not acceptable.
	ErrBadID = errors.New("invalid id")
	// ErrBadDocument means a session body is not a JSON object or a turn is malformed.
	ErrBadDocument = errors.New("invalid session document")
)

var (
	idPattern     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	tenantPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// ValidID reports whether id can name a conversation (or vector, or
// embedding). Ids never contain ':', '{' or '}', so they cannot escape the
// tenant's key namespace.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ValidTenant reports whether t is a DNS-1123 label (a Kubernetes namespace name).
func ValidTenant(t string) bool { return tenantPattern.MatchString(t) }

// unavailableReplies are Redis error replies that mean "not serving right
// now". OOM is a write refused at maxmemory under noeviction (the chart's
// policy): writes fail until TTLs free memory, and nothing is evicted.
var unavailableReplies = []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS", "OOM"}

// classify maps a go-redis error onto the store's errors. Any failure that is
// not a definite reply from a serving Redis is ErrUnavailable.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range unavailableReplies {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%s: %v: %w", op, err, ErrUnavailable)
			}
		}
		var nerr net.Error
		if !errors.As(err, &nerr) {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	return fmt.Errorf("%s: %v: %w", op, err, ErrUnavailable)
}
