package access

import "context"

type tenantKey struct{}

// NewContext returns ctx carrying the authenticated caller.
func NewContext(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// FromContext returns the caller NewContext put in ctx, nil when none.
func FromContext(ctx context.Context) *Tenant {
	t, _ := ctx.Value(tenantKey{}).(*Tenant)
	return t
}
