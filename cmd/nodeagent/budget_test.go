package main

import (
	"strings"
	"testing"
)

func TestDiskBudgetBytes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		v       string
		want    func(int64) bool
		wantErr string
	}{
		{"0", func(n int64) bool { return n == 0 }, ""},
		{"1Gi", func(n int64) bool { return n == 1<<30 }, ""},
		{defaultDiskBudget, func(n int64) bool { return n > 0 }, ""},
		{"101%", nil, "percentage"},
		{"x%", nil, "percentage"},
		{"lots", nil, "--disk-budget"},
	} {
		n, err := diskBudgetBytes(tc.v, dir)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.v, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !tc.want(n) {
			t.Errorf("%q: %d, %v", tc.v, n, err)
		}
	}
}

func TestParseFileRootsAndEndpointHost(t *testing.T) {
	if _, err := parseFileRoots("models,/x"); err == nil || !strings.Contains(err.Error(), "--file-source-roots") {
		t.Errorf("relative root accepted: %v", err)
	}
	if r, err := parseFileRoots("/mnt/weights/, /data"); err != nil || len(r) != 2 || r[0] != "/mnt/weights" {
		t.Errorf("roots %q, %v", r, err)
	}
	for ep, want := range map[string]string{"": "", "minio:9000": "minio", "https://s3.example.com": "s3.example.com", "http://10.0.0.1:9000/": "10.0.0.1"} {
		if got := endpointHost(ep); got != want {
			t.Errorf("endpointHost(%q) = %q, want %q", ep, got, want)
		}
	}
}
