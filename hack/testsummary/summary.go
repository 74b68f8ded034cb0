package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

type testKey struct{ pkg, test string }

// summarizer turns test events into go test's text output plus a summary.
type summarizer struct {
	w       io.Writer
	verbose bool
	// out buffers a running test's output until it ends (non-verbose mode
	// prints it only for failures; both modes read skip reasons from it).
	out                  map[testKey][]string
	passed, fail, skip   int
	pkgFailed, buildFail bool
	// skipped maps a reason to the tests skipped for it.
	skipped map[string][]string
}

func newSummarizer(w io.Writer, verbose bool) *summarizer {
	return &summarizer{w: w, verbose: verbose, out: map[testKey][]string{}, skipped: map[string][]string{}}
}

// read consumes the event stream; lines that are not JSON events (output of
// the go command itself) are printed as they are.
func (s *summarizer) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			copyOut(s.w, string(line)+"\n")
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *summarizer) handle(e event) {
	switch e.Action {
	case "build-output":
		copyOut(s.w, e.Output)
		return
	case "build-fail":
		s.buildFail = true
		return
	}
	if e.Test == "" {
		s.packageEvent(e)
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "output":
		if s.verbose {
			copyOut(s.w, e.Output)
		}
		s.out[k] = append(s.out[k], e.Output)
	case "pass":
		s.passed++
		delete(s.out, k)
	case "fail":
		s.fail++
		if !s.verbose {
			copyOut(s.w, strings.Join(s.out[k], ""))
		}
		delete(s.out, k)
	case "skip":
		s.skip++
		r := skipReason(s.out[k])
		s.skipped[r] = append(s.skipped[r], fmt.Sprintf("%s (%s)", e.Test, e.Package))
		delete(s.out, k)
	}
}

// packageEvent prints a package's own lines; a failed package also prints the
// buffered output of its tests that never ended (a panic or a timeout).
func (s *summarizer) packageEvent(e event) {
	switch e.Action {
	case "output":
		if s.verbose || (e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ")) {
			copyOut(s.w, e.Output)
		}
	case "fail":
		s.pkgFailed = true
		for k, lines := range s.out {
			if k.pkg == e.Package {
				if !s.verbose {
					copyOut(s.w, strings.Join(lines, ""))
				}
				delete(s.out, k)
			}
		}
	}
}

// logLine matches a test's log line: "    file_test.go:12: message".
var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)

// skipReason returns the last logged message of a skipped test: its t.Skip
// text. A message of the testreq form "needs X: detail" is grouped as "needs
// X"; others are grouped by their first 100 characters.
func skipReason(lines []string) string {
	reason := "(no reason given)"
	for _, l := range lines {
		if m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			reason = m[1]
		}
	}
	if what, _, ok := strings.Cut(reason, ": "); ok && strings.HasPrefix(what, "needs ") {
		return what
	}
	if len(reason) > 100 {
		reason = reason[:100] + "..."
	}
	return reason
}

func (s *summarizer) failed() bool { return s.fail > 0 || s.pkgFailed || s.buildFail }

// finish prints the skip table and the closing line.
func (s *summarizer) finish() {
	if len(s.skipped) > 0 {
		reasons := make([]string, 0, len(s.skipped))
		for r := range s.skipped {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool {
			a, b := reasons[i], reasons[j]
			if len(s.skipped[a]) != len(s.skipped[b]) {
				return len(s.skipped[a]) > len(s.skipped[b])
			}
			return a < b
		})
		copyOut(s.w, "skipped tests by reason:\n")
		for _, r := range reasons {
			tests := s.skipped[r]
			copyOut(s.w, fmt.Sprintf("  %4d  %s: %s\n", len(tests), r, strings.Join(tests, ", ")))
		}
	}
	if s.pkgFailed || s.buildFail {
		copyOut(s.w, "a package or its build failed (see above)\n")
	}
	copyOut(s.w, fmt.Sprintf("summary: %d passed, %d failed, %d skipped\n", s.passed, s.fail, s.skip))
}
