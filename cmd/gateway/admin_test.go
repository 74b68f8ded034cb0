package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neuronetes/neuronetes/gateway/affinity"
	"github.com/neuronetes/neuronetes/gateway/front"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// The admin port serves the detector's Presidio API without credentials, for stock Presidio
// clients (the port is NetworkPolicy-protected); the API port keeps it behind authentication.
func TestAdminServesAnalyzeUnauthenticated(t *testing.T) {
	var ext stage.Extensions
	if err := buildGuard(context.Background(), extensionDeps{Registerer: prometheus.NewRegistry(), Static: true}, &ext); err != nil {
		t.Fatal(err)
	}
	if ext.Handlers["POST /analyze"] == nil {
		t.Fatal("the authenticated API-port /analyze is gone")
	}
	g := &gw{reg: prometheus.NewRegistry(), stats: metrics.NewPoolStats(), table: route.NewTable(nil),
		pins: &affinity.Store{Mem: affinity.NewMemory(0, nil)}, front: &front.Server{}, ready: func() bool { return true },
		adminHandlers: ext.AdminHandlers}
	srv := httptest.NewServer(g.adminMux())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/analyze", "application/json", strings.NewReader(`{"text":"mail ana@example.org","language":"en"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"entity_type":"EMAIL_ADDRESS"`) {
		t.Fatalf("admin /analyze without credentials: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(srv.URL + "/supportedentities")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /supportedentities: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Readiness waits for every condition: the table's first snapshot and each extension's handlers.
func TestAllReady(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	for _, tc := range []struct {
		conds []func() bool
		want  bool
	}{{[]func() bool{yes}, true}, {[]func() bool{yes, no}, false}, {[]func() bool{no, yes}, false}, {[]func() bool{yes, yes}, true}} {
		if got := allReady(tc.conds)(); got != tc.want {
			t.Errorf("allReady(%d conds) = %v, want %v", len(tc.conds), got, tc.want)
		}
	}
}
