package main

import (
	"strings"
	"testing"
	"time"
)

// TestValidateModelSources refuses a resync period that is not positive and a copy namespace that
// is no namespace name, naming the flag.
func TestValidateModelSources(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       options
		wantErr string
	}{
		{"off", options{modelSourceResync: time.Minute}, ""},
		{"on", options{modelSourceNamespace: "neuronetes-system", modelSourceResync: time.Minute}, ""},
		{"zero resync", options{modelSourceNamespace: "neuronetes-system"}, "--model-source-resync"},
		{"bad namespace", options{modelSourceNamespace: "Not/A-Namespace", modelSourceResync: time.Minute}, "--model-source-namespace"},
		{"endpoint", options{modelSourceNamespace: "neuronetes-system", modelSourceAddr: ":9444", modelSourceNodeAgent: "neuronetes-system/nn-nodeagent", modelSourceResync: time.Minute}, ""},
		{"endpoint without copies", options{modelSourceAddr: ":9444", modelSourceNodeAgent: "ns/sa", modelSourceResync: time.Minute}, "--model-source-namespace"},
		{"endpoint without caller", options{modelSourceNamespace: "neuronetes-system", modelSourceAddr: ":9444", modelSourceResync: time.Minute}, "--model-source-node-agent"},
		{"endpoint bad caller", options{modelSourceNamespace: "neuronetes-system", modelSourceAddr: ":9444", modelSourceNodeAgent: "Bad_NS/sa", modelSourceResync: time.Minute}, "--model-source-node-agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateModelSources(&tc.o)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("validateModelSources = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
