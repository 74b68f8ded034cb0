package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

// DefaultProbeURL is the sidecar's health endpoint on the pod's loopback.
const DefaultProbeURL = "http://127.0.0.1:7070/healthz"

// probe implements `sidecar probe [URL]`, the exec startup and readiness probe of the injected
// native sidecar: the kubelet's HTTP probes reach the pod IP, and the sidecar listens on
// loopback only. It exits 0 when URL answers 200 within a second, 1 otherwise.
func probe(args []string) int {
	url := DefaultProbeURL
	if len(args) > 0 {
		url = args[0]
	}
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "%s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
