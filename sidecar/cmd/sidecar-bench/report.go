package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
)

// errMissed means a judged measurement missed its target; the verdict line
// (the bench's last) names it.
var errMissed = errors.New("a target was missed")

// judgment is one measurement the verdict covers.
type judgment struct {
	name    string
	value   float64
	limit   float64
	atLeast bool // the target is a minimum (else a maximum)
	unit    string
}

func (j judgment) met() bool {
	if j.atLeast {
		return j.value >= j.limit
	}
	return j.value <= j.limit
}

func (j judgment) String() string {
	op := "<="
	if j.atLeast {
		op = ">="
	}
	return fmt.Sprintf("%s %.2f%s %s %.2f%s", j.name, j.value, j.unit, op, j.limit, j.unit)
}

// judged collects the judged measurements in the order they were taken.
var judged []judgment

func judge(j judgment) { judged = append(judged, j) }

// printVerdict prints the verdict line and returns errMissed when any judged
// measurement missed; nothing judged is not a pass.
func printVerdict() error {
	if len(judged) == 0 {
		fmt.Println("verdict: NOT MEASURED: no judged measurement ran")
		return errMissed
	}
	var missed []string
	for _, j := range judged {
		if !j.met() {
			missed = append(missed, j.String())
		}
	}
	if len(missed) > 0 {
		fmt.Printf("verdict: NOT MET: %d of %d targets missed: %s\n", len(missed), len(judged), strings.Join(missed, "; "))
		return errMissed
	}
	fmt.Printf("verdict: MET: all %d targets\n", len(judged))
	return nil
}

// printCommandStats prints Redis's own CPU per call of the commands the
// rows used (INFO commandstats since the rows started): the server-side
// share of each row, apart from the network and the clients.
func printCommandStats(ctx context.Context, rdb *redis.Client) error {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return err
	}
	var parts []string
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || !slices.Contains([]string{"get", "set", "hmget", "pttl", "evalsha"}, cmd) {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				parts = append(parts, strings.ToUpper(cmd)+" "+v)
			}
		}
	}
	slices.Sort(parts)
	fmt.Printf("  Redis CPU µs per call (INFO commandstats; EVALSHA = the put script): %s\n", strings.Join(parts, ", "))
	return nil
}

// benchFrames reports sealed frame sizes and seal times per codec, with and
// without the JSON dictionary.
func benchFrames(ring *keys.Ring) error {
	type variant struct {
		name string
		c    *frame.Codec
	}
	var vs []variant
	for _, comp := range []frame.Compression{frame.CompressS2, frame.CompressZstd} {
		for _, dict := range []bool{false, true} {
			c, err := frame.New(ring, frame.Options{Tenant: "bench", Compression: comp, UseDict: dict})
			if err != nil {
				return err
			}
			name := string(comp)
			if dict {
				name += "+dict"
			}
			vs = append(vs, variant{name, c})
		}
	}
	fmt.Printf("\nframe bytes and seal µs (compression + AES-GCM), mean over 200 seeded sessions per size\n")
	fmt.Printf("  %-8s", "json")
	for _, v := range vs {
		fmt.Printf(" %10s %6s", v.name, "µs")
	}
	fmt.Println()
	for _, size := range []int{256, 1024, 4096, 16384} {
		n, plain := 200, 0
		bytesOf, took := make([]int, len(vs)), make([]time.Duration, len(vs))
		for s := range n {
			doc := chatJSON(uint64(s+10), size)
			plain += len(doc)
			b := frame.Binding{Kind: "sess", ID: "x"}
			for i, v := range vs { // interleaved, so load hits every codec alike
				t0 := time.Now()
				f, err := v.c.Seal(b, doc)
				took[i] += time.Since(t0)
				if err != nil {
					return fmt.Errorf("seal %s: %w", v.name, err)
				}
				bytesOf[i] += len(f)
			}
		}
		fmt.Printf("  %-8d", plain/n)
		for i := range vs {
			fmt.Printf(" %10d %6.1f", bytesOf[i]/n, float64(took[i].Nanoseconds())/float64(n)/1e3)
		}
		fmt.Println()
	}
	return nil
}
