package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurlLinesPaste runs the summary's lines in bash, as a person pasting them would, with a
// kubectl that prints a key the way `get secret -o jsonpath` does (base64) and a curl that
// records its arguments; the request must reach curl intact.
func TestCurlLinesPaste(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is required: %v", err)
	}
	for _, tc := range []struct{ name, conv, text string }{
		{"plain", "demo-1700000000000", "and how do I get there from the airport"},
		{"shell characters", `it's "quoted" $(x) & ; <y>`, `what's 'this'? $HOME \n`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "my bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			kubectl := filepath.Join(bin, "kubectl")
			write(t, kubectl, "#!/bin/sh\nprintf '%s\\n' \"$@\" > \""+dir+"/kubectl.args\"\nprintf %s c2stbm4tZGVtby1hYmMxMjM=\n")
			write(t, filepath.Join(dir, "curl"), "#!/bin/sh\nprintf '%s\\0' \"$@\" > \""+dir+"/curl.args\"\n")
			lines := curlLines(kubectl, ".local/kubeconfig", "http://10.96.0.12:80", tc.conv, tc.text)
			if len(lines) != 2 || !strings.HasPrefix(lines[1], "curl -sSN ") {
				t.Fatalf("lines = %q", lines)
			}
			cmd := exec.Command(bash, "-euo", "pipefail", "-c", strings.Join(lines, "\n"))
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("pasting %q: %v\n%s", lines, err, out)
			}
			kargs := strings.Fields(read(t, filepath.Join(dir, "kubectl.args")))
			wantK := []string{"--kubeconfig", ".local/kubeconfig", "-n", demoNamespace, "get", "secret", demoKeySecret, "-o", "jsonpath={.data." + demoKeyField + "}"}
			if strings.Join(kargs, " ") != strings.Join(wantK, " ") {
				t.Errorf("kubectl args %q, want %q", kargs, wantK)
			}
			args := strings.Split(strings.TrimSuffix(read(t, filepath.Join(dir, "curl.args")), "\x00"), "\x00")
			want := []string{"-sSN", "-i", "http://10.96.0.12:80/v1/chat/completions",
				"-H", "Authorization: Bearer sk-nn-demo-abc123", "-H", "Content-Type: application/json",
				"-H", "X-Conversation-Id: " + tc.conv, "-d"}
			if len(args) != len(want)+1 || strings.Join(args[:len(want)], "\x00") != strings.Join(want, "\x00") {
				t.Fatalf("curl args %q, want %q and the body", args, want)
			}
			var body struct {
				Model         string          `json:"model"`
				Stream        bool            `json:"stream"`
				StreamOptions map[string]bool `json:"stream_options"`
				Messages      []struct{ Role, Content string }
			}
			if err := json.Unmarshal([]byte(args[len(want)]), &body); err != nil {
				t.Fatalf("body %q: %v", args[len(want)], err)
			}
			if body.Model != demoModel || !body.Stream || !body.StreamOptions["include_usage"] ||
				len(body.Messages) != 1 || body.Messages[0].Role != "user" || body.Messages[0].Content != tc.text {
				t.Errorf("body %+v", body)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "''",
		".local/bin/kubectl":     ".local/bin/kubectl",
		"http://10.96.0.1:80/v1": "http://10.96.0.1:80/v1",
		"a b":                    "'a b'",
		"it's":                   `'it'\''s'`,
		"$KEY":                   "'$KEY'",
		"jsonpath={.data.demo}":  "'jsonpath={.data.demo}'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
