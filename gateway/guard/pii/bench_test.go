package pii

import (
	"fmt"
	"strings"
	"testing"
)

// benchProse is support-chat prose with numbers, dates and versions but no PII (the sentences
// cmd/guard-bench sends).
var benchProse = []string{
	"Our deployment runs version 2.14.3 on 12 nodes since 2024-03-18, and the rollout finished at 14:32.",
	"Please summarise the quarterly report: revenue grew 7.5% to $1,245,000 while costs stayed flat.",
	"The pipeline failed at step 4 of 9 because the cache held 3.2 GB more than its limit of 16 GB.",
	"Can you explain why the latency p99 rose from 180 ms to 420 ms after the upgrade on Tuesday?",
	"In 1969 the mission landed after 102 hours; the crew stayed 21 hours on the surface.",
	"Our team meets every Monday at 9:30 in room 4.12 to review open tickets and plan the week.",
}

// benchNumbers is digit-heavy text: order ids, timestamps, amounts and a few real values.
var benchNumbers = []string{
	"Order 48213377 shipped on 2024-11-02 14:05:31 for $1,204.50 (invoice 2024-001893).",
	"Call +44 20 7946 0958 or 030 12345678; ticket 558213 was reopened at 1733140800.",
	"Paid with 4111 1111 1111 1111, ref 9781234567897, tracking 1Z999AA10123456784.",
	"Rows 12 34 56 78 90 12 34 56 78 90 and 0301234567 0301234568 0301234569 were imported.",
}

func benchText(parts []string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(parts[i%len(parts)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// BenchmarkDetect measures one full scan at the policies' default minimum score.
func BenchmarkDetect(b *testing.B) {
	d := New(Options{MinScore: 0.5})
	for _, c := range []struct {
		name  string
		parts []string
	}{{"prose", benchProse}, {"numbers", benchNumbers}} {
		for _, size := range []int{1 << 10, 8 << 10, 32 << 10} {
			text := benchText(c.parts, size)
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					d.Detect(text)
				}
			})
		}
	}
}
