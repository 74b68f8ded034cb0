// Package seeddocs extracts the Kubernetes object examples from the project's seed documents
// (/work/shared/seeds, ../shared/seeds from a checkout), so that tests can check the API accepts
// each of them verbatim.
//
// The seeds are plain text without code fences. An example starts at a line "apiVersion: ..." at
// column 0 and runs while lines are blank, indented, comments or top-level YAML keys
// ("key:" or "key: value" with an identifier key); the first other line (prose) ends it. Fragments
// that do not start with apiVersion (e.g. a bare "metrics:" list) are not objects and are not
// returned.
package seeddocs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Example is one object example of a seed document.
type Example struct {
	// File is the seed file's base name; Line the 1-based line of its apiVersion.
	File string
	Line int
	// APIVersion, Kind and Name are read from the example.
	APIVersion, Kind, Name string
	// YAML is the example verbatim (trailing blank lines removed).
	YAML string
}

// String names the example as file:line kind/name.
func (e Example) String() string {
	return fmt.Sprintf("%s:%d %s/%s", e.File, e.Line, e.Kind, e.Name)
}

var topLevelKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*:(\s|$)`)

// Extract returns the object examples of one seed document, in order.
func Extract(file string, text []byte) ([]Example, error) {
	var out []Example
	var cur []string
	start := 0
	flush := func() error {
		if cur == nil {
			return nil
		}
		for len(cur) > 0 && strings.TrimSpace(cur[len(cur)-1]) == "" {
			cur = cur[:len(cur)-1]
		}
		ex := Example{File: file, Line: start, YAML: strings.Join(cur, "\n") + "\n"}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(ex.YAML), &head); err != nil {
			return fmt.Errorf("%s:%d: example is not YAML: %w", file, start, err)
		}
		ex.APIVersion, ex.Kind, ex.Name = head.APIVersion, head.Kind, head.Metadata.Name
		out = append(out, ex)
		cur = nil
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(line, "apiVersion:") {
			if err := flush(); err != nil {
				return nil, err
			}
			cur, start = []string{line}, n
			continue
		}
		if cur == nil {
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || line[0] == ' ' || line[0] == '\t' || strings.HasPrefix(t, "#") || topLevelKey.MatchString(line) {
			cur = append(cur, line)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// Dir returns the seeds directory of the checkout at root: root/../shared/seeds, or, in a git
// worktree whose sibling shared/ is absent, the one next to the main checkout (the worktree's
// .git file names it). An error says where it looked.
func Dir(root string) (string, error) {
	tried := []string{filepath.Join(root, "..", "shared", "seeds")}
	if b, err := os.ReadFile(filepath.Join(root, ".git")); err == nil {
		// "gitdir: <main>/.git/worktrees/<name>"
		if g, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: "); ok {
			main := filepath.Dir(filepath.Dir(filepath.Dir(g)))
			tried = append(tried, filepath.Join(main, "..", "shared", "seeds"))
		}
	}
	for _, d := range tried {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return filepath.Clean(d), nil
		}
	}
	return "", fmt.Errorf("no seeds directory (tried %s)", strings.Join(tried, ", "))
}

// All returns the examples of every file in dir, by file name then line.
func All(dir string) ([]Example, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read seeds: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []Example
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("read seed: %w", err)
		}
		ex, err := Extract(n, b)
		if err != nil {
			return nil, err
		}
		out = append(out, ex...)
	}
	return out, nil
}

// NeuroNetesGroup is the API group of NeuroNetes' kinds.
const NeuroNetesGroup = "neuronetes.io"

// SkippedKinds are the kinds of seed examples that are not NeuroNetes' (group/kind, with why).
// The seeds hold none today; a test fails on an example of another group not listed here.
var SkippedKinds = map[string]string{}

// IsNeuroNetes reports whether the example is of a NeuroNetes kind (apiVersion neuronetes.io/...).
func (e Example) IsNeuroNetes() bool {
	return strings.HasPrefix(e.APIVersion, NeuroNetesGroup+"/")
}

// GroupKind is "group/Kind" of the example ("" group for core).
func (e Example) GroupKind() string {
	g, _, ok := strings.Cut(e.APIVersion, "/")
	if !ok {
		g = ""
	}
	return g + "/" + e.Kind
}
