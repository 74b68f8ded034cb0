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
		{"reader role", options{modelSourceNamespace: "neuronetes-system", modelSourceReaderRole: "nn-neuronetes-nodeagent-model-sources", modelSourceResync: time.Minute}, ""},
		{"reader role without copies", options{modelSourceReaderRole: "r", modelSourceResync: time.Minute}, "--model-source-reader-role"},
		{"bad reader role", options{modelSourceNamespace: "neuronetes-system", modelSourceReaderRole: "Bad_Role", modelSourceResync: time.Minute}, "--model-source-reader-role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateModelSources(&tc.o)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("validateModelSources = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
