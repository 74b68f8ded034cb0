// Package demand computes which MIG profiles a cluster asks for, so that a node can publish MIG
// devices only for those (a demand-shaped layout: fewer devices per node, less scheduler work). A
// profile is in demand when some device request of the cluster (ResourceClaims,
// ResourceClaimTemplates, and the claim templates AgentPools will create) selects a MIG device of
// that profile, judged by evaluating the request's DeviceClass and its own CEL selectors on the
// node's candidate devices as the scheduler would; and profiles of devices already allocated on
// the node stay in demand. The core (Profiles) is pure; Source reads the API.
package demand

import (
	"context"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// Request is one device request the cluster makes: the DeviceClass it names and its own
// selectors. Source names where it comes from (for errors).
type Request struct {
	Source    string
	Class     string
	Selectors []resourceapi.DeviceSelector
}

// FromClaimSpec returns the requests of a claim spec: every exactly request and every
// firstAvailable alternative.
func FromClaimSpec(source string, spec resourceapi.ResourceClaimSpec) []Request {
	var out []Request
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			out = append(out, Request{Source: source + "/" + r.Name, Class: r.Exactly.DeviceClassName, Selectors: r.Exactly.Selectors})
		}
		for _, s := range r.FirstAvailable {
			out = append(out, Request{Source: source + "/" + r.Name + "/" + s.Name, Class: s.DeviceClassName, Selectors: s.Selectors})
		}
	}
	return out
}

// Candidates returns, per GPU and MIG profile, one device of the given layout to evaluate
// requests on (placements of one profile carry the same attributes), keyed by profile name.
// devices are the devices a node would publish with every profile.
func Candidates(devices []resourceapi.Device, typeAttr, profileAttr resourceapi.QualifiedName, migType string) map[string][]resourceapi.Device {
	out := map[string][]resourceapi.Device{}
	seen := map[string]bool{}
	for _, d := range devices {
		t, p := d.Attributes[typeAttr].StringValue, d.Attributes[profileAttr].StringValue
		if t == nil || *t != migType || p == nil {
			continue
		}
		key := *p
		if idx := d.Attributes["index"].IntValue; idx != nil {
			key = fmt.Sprintf("%d/%s", *idx, *p)
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out[*p] = append(out[*p], d)
	}
	return out
}

// Profiles returns the sorted MIG profiles that some request selects on some candidate of driver,
// plus the profiles in held (devices allocated on the node). A request whose class does not
// exist selects nothing; a selector that does not compile or fails at runtime on a candidate is
// reported in errs and that candidate is not selected (the scheduler would not allocate it).
func Profiles(ctx context.Context, driver string, candidates map[string][]resourceapi.Device, classes map[string]*resourceapi.DeviceClass, reqs []Request, held []string) (profiles []string, errs []error) {
	want := map[string]bool{}
	for _, h := range held {
		want[h] = true
	}
	compiled := map[string]cel.CompilationResult{}
	compile := func(expr string) cel.CompilationResult {
		r, ok := compiled[expr]
		if !ok {
			r = cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{})
			compiled[expr] = r
		}
		return r
	}
	matches := func(r Request, dc *resourceapi.DeviceClass, d resourceapi.Device) bool {
		for _, sels := range [][]resourceapi.DeviceSelector{dc.Spec.Selectors, r.Selectors} {
			for _, s := range sels {
				if s.CEL == nil {
					continue
				}
				c := compile(s.CEL.Expression)
				if c.Error != nil {
					errs = append(errs, fmt.Errorf("%s: selector %q: %w", r.Source, s.CEL.Expression, c.Error))
					return false
				}
				ok, _, err := c.DeviceMatches(ctx, cel.Device{Driver: driver, Attributes: d.Attributes, Capacity: d.Capacity})
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: selector %q on device %s: %w", r.Source, s.CEL.Expression, d.Name, err))
					return false
				}
				if !ok {
					return false
				}
			}
		}
		return true
	}
	for _, r := range reqs {
		dc, ok := classes[r.Class]
		if !ok {
			continue
		}
		for p, devs := range candidates {
			if want[p] {
				continue
			}
			for _, d := range devs {
				if matches(r, dc, d) {
					want[p] = true
					break
				}
			}
		}
	}
	for p := range want {
		profiles = append(profiles, p)
	}
	sort.Strings(profiles)
	return profiles, errs
}
