// Command testsummary reads `go test -json` on stdin, prints the usual go test
// output, and ends with the skipped tests grouped by reason and a closing line
// "summary: N passed, N failed, N skipped". It never hides a failure: every
// failed test's output and every build error is printed, and it exits 1 when
// any test, package or build failed (a pipeline with pipefail keeps go test's
// own exit code too).
//
//	go test -json ./... 2>&1 | go run ./hack/testsummary       # like go test
//	go test -json -v ./e2e/ 2>&1 | go run ./hack/testsummary -v # like go test -v
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	verbose := flag.Bool("v", false, "print every test's output, as go test -v does")
	flag.Parse()
	s := newSummarizer(os.Stdout, *verbose)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	s.finish()
	if s.failed() {
		os.Exit(1)
	}
}

// copyOut is where a summarizer writes; an error writing it ends the program
// (a closed pipe must not hide that tests ran).
func copyOut(w io.Writer, s string) {
	if _, err := io.WriteString(w, s); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
}
