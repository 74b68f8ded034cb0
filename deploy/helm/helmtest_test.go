package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/neuronetes/neuronetes/internal/testreq"
)

// repoRoot is the repository root, found from this file's location.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// chartDir is the chart under test.
func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "deploy", "helm", "neuronetes") }

// helmBin returns .local/bin/helm (built by `bash hack/build-tools.sh helm`) or skips the test.
func helmBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		return p
	}
	p := filepath.Join(repoRoot(t), ".local", "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		testreq.Tool(t, "helm", "not built (%v): run `bash hack/build-tools.sh helm`", err)
	}
	return p
}

// helm runs helm with args and returns stdout; err carries stderr.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

// valueArgs turns a value set into helm flags: files (relative to deploy/helm) and --set-json pairs.
func valueArgs(t testing.TB, files []string, set []string) []string {
	var args []string
	for _, f := range files {
		args = append(args, "-f", filepath.Join(repoRoot(t), "deploy", "helm", f))
	}
	for _, s := range set {
		args = append(args, "--set-json", s)
	}
	return args
}

// render runs helm template for release "nn" in namespace "neuronetes-system".
func render(t testing.TB, files, set []string, extra ...string) ([]object, error) {
	t.Helper()
	args := append([]string{"template", "nn", chartDir(t), "--namespace", "neuronetes-system", "--include-crds"}, extra...)
	out, err := helm(t, append(args, valueArgs(t, files, set)...)...)
	if err != nil {
		return nil, err
	}
	return splitObjects(out)
}

// object is one rendered manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) name() string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// splitObjects parses a multi-document YAML stream, dropping empty documents.
func splitObjects(s string) ([]object, error) {
	var objs []object
	for i, doc := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var o object
		// Strict: a duplicate key (e.g. a label set twice) is an error, as in the apiserver.
		if err := yaml.UnmarshalStrict([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if o == nil {
			continue
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return nil, errors.New("no objects rendered")
	}
	return objs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// find returns the object of that kind and name, or nil.
func find(objs []object, kind, name string) object {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	return nil
}

// get walks a path of map keys and list indexes.
func get(v any, path ...any) any {
	if o, ok := v.(object); ok {
		v = map[string]any(o)
	}
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// container returns the named container of a pod-template owner.
func container(o object, name string) map[string]any {
	cs, _ := get(map[string]any(o), "spec", "template", "spec", "containers").([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// args returns a container's args as strings.
func args(c map[string]any) []string {
	var out []string
	l, _ := c["args"].([]any)
	for _, a := range l {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
