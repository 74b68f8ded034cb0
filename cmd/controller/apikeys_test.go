package main

import (
	"testing"
	"time"
)

func TestAPIKeyOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		o       apiKeyOptions
		wantErr bool
	}{
		{"off", apiKeyOptions{resync: time.Second}, false},
		{"all namespaces", apiKeyOptions{namespace: "nn-system", resync: time.Second}, false},
		{"listed", apiKeyOptions{namespace: "nn-system", namespaces: "a, b", resync: time.Second}, false},
		{"list without target", apiKeyOptions{namespaces: "a", resync: time.Second}, true},
		{"bad name", apiKeyOptions{namespace: "NN", resync: time.Second}, true},
		{"zero resync", apiKeyOptions{namespace: "nn-system"}, true},
	}
	for _, tt := range tests {
		if err := tt.o.validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: validate() = %v, want error %v", tt.name, err, tt.wantErr)
		}
	}
}
