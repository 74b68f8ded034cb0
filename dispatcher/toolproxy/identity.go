package toolproxy

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	corev1 "k8s.io/api/core/v1"
)

// Caller is who calls a tool: a pod of an AgentPool (Pool set) or the pod of an AgentSession
// (Session and SessionClass set).
type Caller struct {
	Namespace, Pool, Pod string
	// Session is the AgentSession that controls the pod; SessionClass its spec.classRef.
	Session, SessionClass string
}

// Allowed reports whether the caller may call t: a pool that t.Pools lists, or a session whose
// class t.SessionClasses lists.
func (c Caller) Allowed(t *Tool) bool {
	if c.Session != "" {
		return c.Pool == "" && t.SessionClasses[c.SessionClass]
	}
	return c.Pool != "" && t.Pools[c.Pool]
}

// Principal names the caller in messages and idempotency keys: the pool's name, or
// "session:<name>" (a ':' no pool name has, so the two never collide).
func (c Caller) Principal() string {
	if c.Session != "" {
		return "session:" + c.Session
	}
	return c.Pool
}

// Identity names the caller of a request.
type Identity interface {
	// Identify returns the caller, or an error; a *CallerError says how the proxy answers it
	// (any other error is a 401 unknown_caller).
	Identify(r *http.Request) (Caller, error)
}

// Error codes of a refused caller.
const (
	// CodeUnknownCaller (401): no credential, or one that does not authenticate.
	CodeUnknownCaller = "unknown_caller"
	// CodeNotAgentPod (403): an authenticated pod that no AgentPool or AgentSession controls.
	CodeNotAgentPod = "not_an_agent_pod"
	// CodeIdentityUnavailable (503): the apiserver could not be asked.
	CodeIdentityUnavailable = "identity_unavailable"
)

// CallerError is a refused identification: the HTTP status and error code the proxy answers.
type CallerError struct {
	Status int
	Code   string
	// Pod is the authenticated pod that was refused, namespace/name (audited), if the token named one.
	Pod string
	Err error
}

func (e *CallerError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *CallerError) Unwrap() error { return e.Err }

func unauthenticated(format string, args ...any) error {
	return &CallerError{Status: http.StatusUnauthorized, Code: CodeUnknownCaller, Err: fmt.Errorf(format, args...)}
}

func notAgentPod(pod *corev1.Pod, format string, args ...any) error {
	return &CallerError{Status: http.StatusForbidden, Code: CodeNotAgentPod, Pod: pod.Namespace + "/" + pod.Name, Err: fmt.Errorf(format, args...)}
}

// StaticIdentity maps source IPs to callers (static mode without Kubernetes, tests). It trusts
// the network: use it only where nothing but the configured callers can reach the proxy.
type StaticIdentity map[string]Caller

// Identify implements Identity.
func (s StaticIdentity) Identify(r *http.Request) (Caller, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return Caller{}, unauthenticated("caller address %q: %w", r.RemoteAddr, err)
	}
	if c, ok := s[ip]; ok {
		return c, nil
	}
	return Caller{}, unauthenticated("no caller is configured for address %s", ip)
}

// refuseCaller answers a call whose caller Identify refused: the status and code of a
// *CallerError (else 401 unknown_caller), a Bearer challenge with a 401, an audit entry whose
// error is the code.
func refuseCaller(c *call, err error) {
	ce := &CallerError{Status: http.StatusUnauthorized, Code: CodeUnknownCaller, Err: err}
	errors.As(err, &ce)
	c.entry.Outcome, c.entry.Error, c.entry.Pod = OutcomeRefusedAuth, ce.Code, ce.Pod
	switch ce.Status {
	case http.StatusUnauthorized:
		c.w.Header().Set("WWW-Authenticate", `Bearer realm="neuronetes-toolproxy"`)
	case http.StatusServiceUnavailable:
		c.entry.Outcome = OutcomeError
		c.apiError(ce.Status, ce.Code, "", "the caller cannot be identified now: %v", err)
		return
	}
	c.apiError(ce.Status, ce.Code, "", "the caller is not a pod of an AgentPool or an AgentSession: %v", err)
}
