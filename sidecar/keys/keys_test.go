package keys

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLoad(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, KeySize)
	k2 := bytes.Repeat([]byte{2}, KeySize)
	for _, tc := range []struct {
		name    string
		files   map[string]string
		active  string
		wantErr bool
	}{
		{"raw and base64 with active", map[string]string{"k1": string(k1), "k2": base64.StdEncoding.EncodeToString(k2) + "\n", "active": "k2\n"}, "k2", false},
		{"single key, no active file", map[string]string{"only": base64.RawURLEncoding.EncodeToString(k1)}, "only", false},
		{"secret volume dot entries ignored", map[string]string{"k1": string(k1), "..data_tmp": "junk", "active": "k1"}, "k1", false},
		{"two keys, no active", map[string]string{"k1": string(k1), "k2": string(k2)}, "", true},
		{"active names missing key", map[string]string{"k1": string(k1), "active": "k9"}, "", true},
		{"short key", map[string]string{"k1": "c2hvcnQ=", "active": "k1"}, "", true},
		{"bad id", map[string]string{"k 1": string(k1), "active": "k 1"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, c := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Load(dir)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Load succeeded with ids %v", r.IDs())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Active() != tc.active {
				t.Fatalf("active = %q, want %q", r.Active(), tc.active)
			}
		})
	}
}

func TestDerivePerTenant(t *testing.T) {
	r, err := NewRing("k", map[string][]byte{"k": bytes.Repeat([]byte{7}, KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Derive("k", "a")
	a2, _ := r.Derive("k", "a")
	b, _ := r.Derive("k", "b")
	if !bytes.Equal(a, a2) || bytes.Equal(a, b) || len(a) != KeySize {
		t.Fatalf("derive: deterministic=%v distinct=%v", bytes.Equal(a, a2), !bytes.Equal(a, b))
	}
	if _, err := r.Derive("nope", "a"); err == nil {
		t.Fatal("unknown key derived")
	}
}

func TestEmptyRing(t *testing.T) {
	r := Empty()
	if r.Active() != "" || len(r.IDs()) != 0 {
		t.Fatalf("empty ring: active %q ids %v", r.Active(), r.IDs())
	}
	if _, err := r.Derive("", "t"); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("Derive on empty ring: %v", err)
	}
}
