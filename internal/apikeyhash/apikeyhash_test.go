package apikeyhash

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseStored(t *testing.T) {
	hashed := Hash("sk-stored")
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{"sk-1\n", Hash("sk-1"), false},
		{"sha256:" + strings.ToUpper(hashed), hashed, false},
		{"sha256:abc", "", true},
		{"sha256:" + strings.Repeat("z", 64), "", true},
		{"  \n", "", true},
	}
	for _, tt := range tests {
		got, err := ParseStored(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseStored(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestEncodeNeverPublishesAKey: the published data holds hashes, never a key, and decodes back.
func TestEncodeNeverPublishesAKey(t *testing.T) {
	e := FromData(map[string][]byte{"a": []byte("sk-secret-a"), "b": []byte(""), "c": []byte("sha256:" + Hash("sk-c"))})
	data, err := Encode(map[string]Entry{"keys": e, "gone": {Problem: ProblemNotFound}})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range data {
		if strings.Contains(v, "sk-secret-a") {
			t.Errorf("entry %s publishes the raw key: %s", name, v)
		}
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Entry{
		"keys": {Hashes: map[string]string{"a": Hash("sk-secret-a"), "c": Hash("sk-c")}, Errors: map[string]string{"b": "empty API key"}},
		"gone": {Problem: ProblemNotFound},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if _, err := Decode(map[string]string{"x": `{"hashes":{"a":"not-hex"}}`}); err == nil {
		t.Errorf("Decode accepted a malformed hash")
	}
}
