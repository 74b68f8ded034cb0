package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// HeaderTargetPool names the AgentPool ("namespace/name") a dispatcher request is for. Only the
// dispatcher's credential may send it: it bypasses model routing, not access control.
const HeaderTargetPool = "X-Neuronetes-Target-Pool"

// DispatcherName is the tenant name of dispatcher calls. The colon is in no Kubernetes name, so
// no Tenant object can share its quota or session-key scope.
const DispatcherName = ":dispatcher"

// MinDispatcherTokenBytes is the shortest dispatcher credential accepted.
const MinDispatcherTokenBytes = 32

// Dispatcher authenticates the NeuroNetes dispatcher: a bearer token shared through a Secret
// of the release namespace only (the chart's <release>-dispatcher-token). A call with it names
// the ToolBinding's AgentPool in HeaderTargetPool and is served by that pool alone, as a tenant
// of the pool's namespace with every model of it, no quota of any Tenant object, and the
// session-key scope "<namespace>/:dispatcher".
type Dispatcher struct {
	sum [sha256.Size]byte
}

// NewDispatcher returns the authenticator of token (at least MinDispatcherTokenBytes bytes).
func NewDispatcher(token string) *Dispatcher {
	return &Dispatcher{sum: sha256.Sum256([]byte(token))}
}

// Authenticate reports whether h carries the dispatcher credential (ok), and then the tenant
// of the named pool or the error of a bad target. A request without the credential that names
// a target pool is refused: a Tenant cannot pick pools.
func (d *Dispatcher) Authenticate(h http.Header) (t *access.Tenant, ok bool, aerr *openai.Error) {
	target := h.Get(HeaderTargetPool)
	if d != nil {
		cred := Credential(h)
		sum := sha256.Sum256([]byte(cred))
		if cred != "" && subtle.ConstantTimeCompare(sum[:], d.sum[:]) == 1 {
			ref, err := parseTarget(target)
			if err != nil {
				return nil, true, err
			}
			return &access.Tenant{Name: DispatcherName, Namespace: ref.Namespace, AllModels: true, Pool: &ref,
				Priorities: map[route.Priority]bool{}}, true, nil
		}
	}
	if target != "" {
		return nil, true, openai.NewError(http.StatusForbidden, "permission_denied", "forbidden_target_pool", HeaderTargetPool,
			"header %s is for the NeuroNetes dispatcher only", HeaderTargetPool)
	}
	return nil, false, nil
}

func parseTarget(v string) (route.PoolRef, *openai.Error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return route.PoolRef{}, openai.BadRequest(HeaderTargetPool, "header %s must be <namespace>/<agentpool>, got %q", HeaderTargetPool, v)
	}
	return route.PoolRef{Namespace: ns, Name: name}, nil
}
