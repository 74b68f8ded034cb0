// Package toolproxy is the dispatcher's tool proxy: agents call the tools of http and grpc
// ToolBindings through it, and it checks each call's arguments against the binding's JSON
// Schema, allows only the pools the binding names, replays the first answer to a repeated
// Idempotency-Key of a side-effecting tool, bounds the call by the binding's timeout, and
// records an audit entry (tool, pool, outcome, duration, sizes; never argument values).
package toolproxy

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/binding"
)

// DefaultTimeout of a tool call.
const DefaultTimeout = 30 * time.Second

// Tool is a compiled tool binding.
type Tool struct {
	// Key is the binding; Name the tool name (unique per namespace).
	Key  types.NamespacedName
	Name string
	// Type is http or grpc; Endpoint and Method address it.
	Type, Endpoint, Method string
	// Schema checks the arguments (nil: any JSON object).
	Schema *jsonschema.Schema
	// Pools may call the tool.
	Pools map[string]bool
	// SessionClasses: the AgentSessions of these AgentClasses may call the tool.
	SessionClasses map[string]bool
	// SideEffects requires an Idempotency-Key.
	SideEffects bool
	// Timeout of a call.
	Timeout time.Duration
}

// Build compiles a binding; errors name the field.
func Build(b *v1alpha1.ToolBinding) (*Tool, error) {
	t := &Tool{Key: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}, Name: b.Name, Type: b.Spec.Type,
		Endpoint: b.Spec.Endpoint, Pools: map[string]bool{}, SessionClasses: map[string]bool{}, Timeout: DefaultTimeout}
	if t.Endpoint == "" {
		return nil, &binding.FieldError{Field: "spec.endpoint", Reason: "InvalidSpec", Msg: "required for a tool"}
	}
	if b.Spec.AgentPoolRef != nil && b.Spec.AgentPoolRef.Name != "" {
		t.Pools[b.Spec.AgentPoolRef.Name] = true
	}
	if c := b.Spec.Tool; c != nil {
		if c.Name != "" {
			t.Name = c.Name
		}
		t.Method, t.SideEffects = c.Method, c.SideEffects
		for _, p := range c.AllowedPools {
			t.Pools[p] = true
		}
		for _, cl := range c.AllowedSessionClasses {
			t.SessionClasses[cl] = true
		}
		if c.Timeout != "" {
			d, err := c.Timeout.Parse()
			if err != nil || d <= 0 {
				return nil, &binding.FieldError{Field: "spec.tool.timeout", Reason: "InvalidSpec", Msg: fmt.Sprintf("%q is not a positive duration", c.Timeout)}
			}
			t.Timeout = d
		}
		if c.Parameters != nil && len(c.Parameters.Raw) > 0 {
			s, err := Compile(c.Parameters.Raw)
			if err != nil {
				return nil, &binding.FieldError{Field: "spec.tool.parameters", Reason: "InvalidSchema", Msg: err.Error()}
			}
			t.Schema = s
		}
	}
	if t.Type == "http" && t.Method == "" {
		t.Method = "POST"
	}
	if t.Type == "grpc" && !strings.Contains(t.Method, "/") {
		return nil, &binding.FieldError{Field: "spec.tool.method", Reason: "InvalidSpec", Msg: "want package.Service/Method"}
	}
	if len(t.Pools) == 0 && len(t.SessionClasses) == 0 {
		return nil, &binding.FieldError{Field: "spec.tool.allowedPools", Reason: "NoCallers", Msg: "no pool or session may call the tool: set spec.agentPoolRef, spec.tool.allowedPools or spec.tool.allowedSessionClasses"}
	}
	return t, nil
}

// Registry holds the tools of every watched namespace.
type Registry struct {
	mu     sync.RWMutex
	tools  map[types.NamespacedName]*Tool
	errs   map[types.NamespacedName]*binding.FieldError
	byName map[string]*Tool // namespace/tool name
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: map[types.NamespacedName]*Tool{}, errs: map[types.NamespacedName]*binding.FieldError{}, byName: map[string]*Tool{}}
}

// Update implements binding.ToolRegistry.
func (r *Registry) Update(b *v1alpha1.ToolBinding) {
	key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	t, err := Build(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tools, key)
	delete(r.errs, key)
	if err != nil {
		fe, ok := err.(*binding.FieldError)
		if !ok {
			fe = &binding.FieldError{Field: "spec", Reason: "InvalidSpec", Msg: err.Error()}
		}
		r.errs[key] = fe
	} else {
		r.tools[key] = t
	}
	r.reindex()
}

// Delete implements binding.ToolRegistry.
func (r *Registry) Delete(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tools, key)
	delete(r.errs, key)
	r.reindex()
}

// reindex rebuilds byName; of two bindings naming one tool in a namespace the first by binding
// name wins and the other gets an error.
func (r *Registry) reindex() {
	r.byName = map[string]*Tool{}
	keys := make([]types.NamespacedName, 0, len(r.tools))
	for k := range r.tools {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		t := r.tools[k]
		n := k.Namespace + "/" + t.Name
		if other := r.byName[n]; other != nil {
			r.errs[k] = &binding.FieldError{Field: "spec.tool.name", Reason: "DuplicateTool", Msg: fmt.Sprintf("tool %q is already served by ToolBinding %s", t.Name, other.Key.Name)}
			continue
		}
		delete(r.errs, k)
		r.byName[n] = t
	}
}

// Lookup returns the tool name of namespace ns.
func (r *Registry) Lookup(ns, name string) *Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byName[ns+"/"+name]
}

// Health reports every tool binding for its Ready condition.
func (r *Registry) Health() map[types.NamespacedName]binding.Health {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[types.NamespacedName]binding.Health{}
	for k, e := range r.errs {
		out[k] = binding.Health{State: binding.StateError, Reason: e.Reason, Message: e.Error()}
	}
	for k, t := range r.tools {
		if _, bad := r.errs[k]; bad {
			continue
		}
		pools := make([]string, 0, len(t.Pools))
		for p := range t.Pools {
			pools = append(pools, p)
		}
		for cl := range t.SessionClasses {
			pools = append(pools, "sessions of class "+cl)
		}
		sort.Strings(pools)
		out[k] = binding.Health{State: binding.StateConsuming, ReadyReason: "ToolServed", Summary: fmt.Sprintf("%s tool %q at /v1/tools/%s/%s for pools %s", t.Type, t.Name, k.Namespace, t.Name, strings.Join(pools, ", "))}
	}
	return out
}
