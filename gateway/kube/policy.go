package kube

import (
	"fmt"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// apply sets the fields a RoutingPolicy declares; a field that does not parse keeps its value
// and is reported (the CRD's validation rejects most such input before it gets here).
func apply(p *route.Policy, s *v1alpha1.RoutingPolicySpec) []error {
	var errs []error
	if len(s.SessionKeys) > 0 {
		keys := make([]route.KeySource, len(s.SessionKeys))
		for i, k := range s.SessionKeys {
			keys[i] = route.KeySource{Header: k.Header, Body: k.Body}
		}
		p.SessionKeys = keys
	}
	if a := s.Affinity; a != nil {
		if a.PinTTL != "" {
			if d, err := a.PinTTL.Parse(); err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("spec.affinity.pinTTL %q: must be a positive duration", a.PinTTL))
			} else {
				p.PinTTL = d
			}
		}
		if a.LoadFactor != "" {
			if f, err := a.LoadFactor.Float64(); err != nil || f < 0 {
				errs = append(errs, fmt.Errorf("spec.affinity.loadFactor %q: must be a non-negative number", a.LoadFactor))
			} else {
				p.LoadFactor = f
			}
		}
	}
	if sc := s.Scoring; sc != nil {
		for _, w := range []struct {
			name string
			v    *v1alpha1.Decimal
			dst  *float64
		}{{"prefill", sc.Prefill, &p.Weights.Prefill}, {"prefixCache", sc.PrefixCache, &p.Weights.PrefixCache}, {"queue", sc.Queue, &p.Weights.Queue},
			{"kvCache", sc.KVCache, &p.Weights.KVCache}, {"inFlight", sc.InFlight, &p.Weights.InFlight}, {"hash", sc.Hash, &p.Weights.Hash}} {
			if w.v == nil {
				continue
			}
			if f, err := w.v.Float64(); err != nil || f < 0 {
				errs = append(errs, fmt.Errorf("spec.scoring.%s %q: must be a non-negative number", w.name, *w.v))
			} else {
				*w.dst = f
			}
		}
	}
	if ad := s.Admission; ad != nil {
		if ad.MaxInFlightPerEndpoint != nil {
			p.MaxInFlightPerEndpoint = int(*ad.MaxInFlightPerEndpoint)
		}
		if ad.MaxQueue != nil {
			p.MaxQueue = int(*ad.MaxQueue)
		}
		if ad.QueueTimeout != "" {
			if d, err := ad.QueueTimeout.Parse(); err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("spec.admission.queueTimeout %q: must be a positive duration", ad.QueueTimeout))
			} else {
				p.QueueTimeout = d
			}
		}
	}
	if s.Priority != "" {
		if pr, ok := route.ParsePriority(string(s.Priority)); ok {
			p.Priority = pr
		} else {
			errs = append(errs, fmt.Errorf("spec.priority %q: must be high, normal or low", s.Priority))
		}
	}
	if pr := s.Pricing; pr != nil {
		in, err1 := pr.InputPerMillionTokens.Float64()
		out, err2 := pr.OutputPerMillionTokens.Float64()
		if err1 != nil || err2 != nil || in < 0 || out < 0 {
			errs = append(errs, fmt.Errorf("spec.pricing: prices must be non-negative numbers"))
		} else {
			p.InputPrice, p.OutputPrice = in/1e6, out/1e6
		}
	}
	return errs
}
