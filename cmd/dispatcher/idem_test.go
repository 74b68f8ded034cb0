package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIdemSealerSources reads the idempotency key from --idempotency-key-file,
// else $NEURONETES_IDEMPOTENCY_KEY; a bad key names its source.
func TestIdemSealerSources(t *testing.T) {
	good := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	dir := t.TempDir()
	n := 0
	file := func(content string) string {
		n++
		p := filepath.Join(dir, "key"+strconv.Itoa(n))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, file, env, wantErr string
	}{
		{"file", file(good), "", ""},
		{"file wins over env", file(good), "bad", ""},
		{"bad file", file("short"), "", "--idempotency-key-file"},
		{"missing file", filepath.Join(dir, "none"), "", "--idempotency-key-file"},
		{"env", "", good, ""},
		{"bad env", "", "c2hvcnQ=", "$NEURONETES_IDEMPOTENCY_KEY"},
		{"neither: a key of this process", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NEURONETES_IDEMPOTENCY_KEY", tc.env)
			s, err := (&options{idemKeyFile: tc.file}).idemSealer()
			if tc.wantErr == "" && (err != nil || s == nil) {
				t.Fatalf("idemSealer = %v, %v", s, err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("idemSealer error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}
