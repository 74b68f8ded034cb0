package sessionkey

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/access"
)

func TestScope(t *testing.T) {
	secret := bytes.Repeat([]byte("k"), MinSecretBytes)
	replicaA, err := New(secret)
	if err != nil {
		t.Fatal(err)
	}
	replicaB, _ := New(secret)
	other, _ := New(bytes.Repeat([]byte("o"), MinSecretBytes))
	a := &access.Tenant{Namespace: "demo", Name: "a"}
	b := &access.Tenant{Namespace: "demo", Name: "b"}
	aElsewhere := &access.Tenant{Namespace: "other", Name: "a"}
	base := replicaA.Scope(a, "conv-1")
	for _, tc := range []struct {
		name string
		got  string
		same bool
	}{
		{"same tenant and key on another replica", replicaB.Scope(a, "conv-1"), true},
		{"another tenant of the namespace sending the same key", replicaA.Scope(b, "conv-1"), false},
		{"a tenant of the same name in another namespace", replicaA.Scope(aElsewhere, "conv-1"), false},
		{"another key of the same tenant", replicaA.Scope(a, "conv-2"), false},
		{"anonymous caller", replicaA.Scope(access.Anonymous, "conv-1"), false},
		{"a gateway with another secret", other.Scope(a, "conv-1"), false},
	} {
		if (tc.got == base) != tc.same {
			t.Errorf("%s: %q vs %q, same=%v wanted", tc.name, tc.got, base, tc.same)
		}
	}
	// The form the sidecar accepts as a conversation id; the client's key is not in it.
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(base) || strings.Contains(base, "conv-1") {
		t.Errorf("scoped key %q", base)
	}
	if got := replicaA.Scope(a, ""); got != "" {
		t.Errorf("empty key scoped to %q", got)
	}
	// Length prefixes: moving bytes between tenant and key changes the key.
	x := &access.Tenant{Namespace: "demo", Name: "ab"}
	if replicaA.Scope(x, "c") == replicaA.Scope(a, "bc") {
		t.Error("tenant/key boundary is ambiguous")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(good, []byte(strings.Repeat("s", MinSecretBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, wantErr string
	}{
		{good, ""},
		{short, "at least 32"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		_, err := Load(tc.path)
		if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Load(%s): %v, want %q", tc.path, err, tc.wantErr)
		}
	}
	if Random().Scope(access.Anonymous, "k") == Random().Scope(access.Anonymous, "k") {
		t.Error("two random scopers agree")
	}
}
