package serving

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestRequireLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9411", true},
		{"127.1.2.3:9411", true},
		{"[::1]:9411", true},
		{"localhost:9411", true},
		{":9411", false},
		{"0.0.0.0:9411", false},
		{"10.0.0.5:9411", false},
		{"[::]:9411", false},
		{"example.com:9411", false},
		{"127.0.0.1", false},
	} {
		if err := RequireLoopback(tc.addr); (err == nil) != tc.ok {
			t.Errorf("RequireLoopback(%q) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
}

func TestRequireBearer(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	const token = "0123456789abcdef0123"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("abc"), 0o600)
	for _, f := range []string{"", short, filepath.Join(dir, "missing")} {
		if _, err := RequireBearer(f); err == nil {
			t.Errorf("RequireBearer(%q) accepted", f)
		}
	}
	guard, err := RequireBearer(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	h := guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"none", "", http.StatusUnauthorized},
		{"wrong", "Bearer 0123456789abcdef0124", http.StatusUnauthorized},
		{"prefix", "Bearer 0123456789abcdef", http.StatusUnauthorized},
		{"basic", "Basic " + token, http.StatusUnauthorized},
		{"right", "Bearer " + token, http.StatusOK},
		{"scheme case", "bearer " + token, http.StatusOK},
	} {
		r := httptest.NewRequest("POST", "/debug/health", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, w.Code, tc.want)
		}
	}
	// A rotated token replaces the old one at once.
	if err := os.WriteFile(tokenFile, []byte("fedcba9876543210fedc"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/debug/pid", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: status %d, want 401", w.Code)
	}
}
