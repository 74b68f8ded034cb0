package v1alpha1

import (
	"strings"
	"testing"
)

// restoreFromCases are shared by the Go rule's test and the admission policy's test, so the
// two enforce the same thing.
var restoreFromCases = []struct {
	name, namespace, value string
	ok                     bool
}{
	{"agent only", "team-a", "chat", true},
	{"own checkpoint", "team-a", "chat/team-a.ck-1", true},
	{"foreign checkpoint", "team-a", "chat/team-b.ck-1", false},
	{"namespace prefix of ours", "team-a", "chat/team-ab.ck-1", false},
	{"id without namespace", "team-a", "chat/ck-1", false},
	{"namespace path", "team-a", "team-b/chat/team-b.ck", false},
	{"empty agent", "team-a", "/team-a.ck", false},
	{"bad agent", "team-a", "../chat", false},
	{"dot-dot id", "team-a", "chat/team-a..x", false},
	{"empty id", "team-a", "chat/", false},
}

func TestParseRestoreFrom(t *testing.T) {
	for _, tc := range restoreFromCases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseRestoreFrom(tc.namespace, tc.value)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseRestoreFrom(%q, %q) = %v, want ok=%v", tc.namespace, tc.value, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), RestoreFromField) {
				t.Errorf("error %q does not name the field %s", err, RestoreFromField)
			}
		})
	}
}

func TestValidateRestoreSource(t *testing.T) {
	tests := []struct {
		name, agent, id string
		ok              bool
		field           string
	}{
		{"latest of own agent", "chat", "", true, ""},
		{"own id", "chat", "team-a.ck", true, ""},
		{"id only", "", "team-a.ck", true, ""},
		{"foreign id", "chat", "team-b.ck", false, "spec.checkpointID"},
		{"slash in agent", "x/y", "", false, "spec.agent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRestoreSource("spec.agent", "spec.checkpointID", "team-a", tc.agent, tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateRestoreSource(%q, %q) = %v, want ok=%v", tc.agent, tc.id, err, tc.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Errorf("error %q does not name the field", err)
			}
		})
	}
}
