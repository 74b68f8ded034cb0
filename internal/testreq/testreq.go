// Package testreq is the test suite's policy for tests that cannot run
// where they are: a skip is not a pass.
//
//   - Tool (a required tool, server or privilege is missing) skips the test on
//     a developer's machine and fails it in CI: under CI=true, or
//     NEURONETES_TEST_STRICT=1 (which `make test` exports). NEURONETES_TEST_STRICT=0
//     turns the strict mode off even under CI=true.
//   - GPU (the test needs real GPU hardware) is the one reason that skips in CI
//     too; NEURONETES_REQUIRE_GPU=1 makes it fail, for runs on GPU machines.
//
// Every skip message starts with "needs <what>:", which hack/testsummary
// groups skipped tests by.
package testreq

import (
	"fmt"
	"os"
	"testing"
)

// Environment variables that select the policy.
const (
	// EnvStrict forces the strict (CI) policy on ("1") or off ("0").
	EnvStrict = "NEURONETES_TEST_STRICT"
	// EnvRequireGPU = "1" makes a missing GPU fail the test.
	EnvRequireGPU = "NEURONETES_REQUIRE_GPU"
)

// Strict reports whether a missing tool fails the test: NEURONETES_TEST_STRICT
// when set to 0 or 1, else whether CI is "true" or "1".
func Strict() bool {
	switch os.Getenv(EnvStrict) {
	case "1", "true":
		return true
	case "0", "false":
		return false
	}
	ci := os.Getenv("CI")
	return ci == "true" || ci == "1"
}

// Message returns the skip or failure text for a missing what: "needs
// <what>: <detail>".
func Message(what, format string, args ...any) string {
	return fmt.Sprintf("needs %s: %s", what, fmt.Sprintf(format, args...))
}

// Tool stops the test because what (a tool, a server binary, a privilege or a
// kernel feature) is missing: it fails the test under the strict policy and
// skips it otherwise. The detail should say how to install what.
func Tool(t testing.TB, what, format string, args ...any) {
	t.Helper()
	msg := Message(what, format, args...)
	if Strict() {
		t.Fatalf("%s (a missing tool fails under CI=true or %s=1; set %s=0 to skip instead)", msg, EnvStrict, EnvStrict)
		return
	}
	t.Skip(msg)
}

// GPU skips the test because it needs real GPU hardware, which this machine
// lacks; with NEURONETES_REQUIRE_GPU=1 it fails instead.
func GPU(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := Message("GPU", format, args...)
	if os.Getenv(EnvRequireGPU) == "1" {
		t.Fatalf("%s (%s=1)", msg, EnvRequireGPU)
		return
	}
	t.Skip(msg)
}
