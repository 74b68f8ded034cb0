package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// The testdata streams are real `go test -json` output: mixed.json of a
// package with a pass, a fail, a testreq-style skip, a plain skip and a
// skipped subtest; panic.json of a test that panics; buildfail.json of a
// package that does not compile.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		file       string
		verbose    bool
		wantFailed bool
		want       []string
		notWant    []string
	}{
		{"mixed.json", false, true, []string{
			"p_test.go:6: boom", "FAIL\texample.com/sum/p",
			"skipped tests by reason:\n",
			"     1  needs redis-server: TestSkipTool (example.com/sum/p)\n",
			"     1  needs GPU: TestSub/a (example.com/sum/p)\n",
			"     1  mode 1: TestSkipOther (example.com/sum/p)\n",
		}, []string{"=== RUN   TestPass", "--- PASS"}},
		{"mixed.json", true, true, []string{"=== RUN   TestPass\n", "--- PASS: TestPass", "p_test.go:6: boom"}, nil},
		{"panic.json", false, true, []string{"r_test.go:4: before", "panic: assignment to entry in nil map", "FAIL\texample.com/sum/r"}, nil},
		{"buildfail.json", false, true, []string{"undefined: undefined", "[build failed]", "a package or its build failed"}, nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in, err := os.Open("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			var out bytes.Buffer
			s := newSummarizer(&out, tc.verbose)
			if err := s.read(in); err != nil {
				t.Fatal(err)
			}
			s.finish()
			got := out.String()
			if s.failed() != tc.wantFailed {
				t.Errorf("failed() = %v, want %v", s.failed(), tc.wantFailed)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
			lines := strings.Split(strings.TrimSpace(got), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "summary: ") {
				t.Errorf("last line %q, want the summary", last)
			}
		})
	}
}

func TestCounts(t *testing.T) {
	in, err := os.Open("testdata/mixed.json")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	s := newSummarizer(&out, false)
	if err := s.read(in); err != nil {
		t.Fatal(err)
	}
	s.finish()
	// TestPass, TestSub/b and TestSub pass; TestFail fails; three skip.
	if !strings.HasSuffix(out.String(), "summary: 3 passed, 1 failed, 3 skipped\n") {
		t.Fatalf("closing line:\n%s", out.String())
	}
}

func TestPlainLinesPassThrough(t *testing.T) {
	var out bytes.Buffer
	s := newSummarizer(&out, false)
	if err := s.read(strings.NewReader("go: downloading example.com/x v1.0.0\n{not json\n")); err != nil {
		t.Fatal(err)
	}
	if want := "go: downloading example.com/x v1.0.0\n{not json\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}

func TestSkipReason(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"=== RUN   TestX\n", "    x_test.go:9: needs criu: not found\n", "--- SKIP: TestX (0.00s)\n"}, "needs criu"},
		{[]string{"    x_test.go:9: plain reason\n"}, "plain reason"},
		{[]string{"    x_test.go:3: first\n", "    x_test.go:9: needs GPU: no NVML\n"}, "needs GPU"},
		{[]string{"=== RUN   TestX\n"}, "(no reason given)"},
		{[]string{"    x_test.go:9: " + strings.Repeat("a", 150) + "\n"}, strings.Repeat("a", 100) + "..."},
	} {
		if got := skipReason(tc.lines); got != tc.want {
			t.Errorf("skipReason(%q) = %q, want %q", tc.lines, got, tc.want)
		}
	}
}
