package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/dispatcher/queue"
	"github.com/neuronetes/neuronetes/dispatcher/queue/queuetest"
)

// faultBroker is one provider's real server in the fault test.
type faultBroker struct {
	provider, url, queueName string
	// flag points the dispatcher at the broker.
	flag    []string
	produce func(t *testing.T, i int)
	// ids returns the message-id headers of every message in dest.
	ids func(t *testing.T, dest string) []string
}

const faultMessages = 5000

func faultNATS(t *testing.T) faultBroker {
	url := queuetest.StartNATS(t)
	js := natsStreams(t, url)
	return faultBroker{provider: "nats", url: url, queueName: "TASKS", flag: []string{"--nats-url", url},
		produce: func(t *testing.T, i int) {
			m := nats.NewMsg("tasks")
			m.Data = []byte(fmt.Sprintf("task %d", i))
			m.Header.Set(queue.HeaderKey, fmt.Sprintf("k-%d", i%50))
			if _, err := js.PublishMsg(context.Background(), m, jetstream.WithMsgID(fmt.Sprintf("m-%05d", i))); err != nil {
				t.Fatal(err)
			}
		},
		ids: func(t *testing.T, dest string) []string {
			var out []string
			for _, m := range natsRead(t, js, dest) {
				out = append(out, m.Headers().Get(queue.HeaderMessageID))
			}
			return out
		}}
}

func faultKafka(t *testing.T) faultBroker {
	seeds := queuetest.StartKafka(t, 8, "tasks", "results", "dead")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	url := strings.Join(seeds, ",")
	return faultBroker{provider: "kafka", url: url, queueName: "tasks", flag: []string{"--kafka-url", url},
		produce: func(t *testing.T, i int) {
			r := &kgo.Record{Topic: "tasks", Key: []byte(fmt.Sprintf("k-%d", i%50)), Value: []byte(fmt.Sprintf("task %d", i)),
				Headers: []kgo.RecordHeader{{Key: queue.HeaderMessageID, Value: []byte(fmt.Sprintf("m-%05d", i))}}}
			cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		},
		ids: func(t *testing.T, dest string) []string {
			c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(dest), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var out []string
			for idle := 0; idle < 2; {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				fs := c.PollFetches(ctx)
				cancel()
				n := 0
				fs.EachRecord(func(r *kgo.Record) {
					n++
					for _, h := range r.Headers {
						if h.Key == queue.HeaderMessageID {
							out = append(out, string(h.Value))
						}
					}
				})
				if n == 0 {
					idle++
				}
			}
			return out
		}}
}

func faultRedis(t *testing.T, addr string) faultBroker {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	return faultBroker{provider: "redis", url: "redis://" + addr, queueName: "tasks", flag: []string{"--redis-queue-url", "redis://" + addr},
		produce: func(t *testing.T, i int) {
			if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: "tasks", Values: []any{"body", fmt.Sprintf("task %d", i),
				"key", fmt.Sprintf("k-%d", i%50), queue.HeaderMessageID, fmt.Sprintf("m-%05d", i)}}).Err(); err != nil {
				t.Fatal(err)
			}
		},
		ids: func(t *testing.T, dest string) []string {
			ms, err := rc.XRange(context.Background(), dest, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, m := range ms {
				out = append(out, fmt.Sprint(m.Values[queue.HeaderMessageID]))
			}
			return out
		}}
}

// TestDispatcherFault, per provider: two dispatcher replicas and three ledger agents work
// through 5,000 messages; once a fifth are answered one replica is SIGKILLed and one agent pod
// is deleted with no grace (its container is killed). Afterwards every message has exactly one
// result or one dead letter, no result is published twice, and no message was processed by an
// agent after its result was recorded: a message the agents completed twice must have had its
// first completion cut off by a kill (completed for the killed replica, or on the killed pod,
// in the moments around the kill and never delivered).
func TestDispatcherFault(t *testing.T) {
	d := dispSetup(t, "disp-fault", nil)
	img := d.e.Image(t, "ledger-agent", "./e2e/cmd/ledger-agent")
	for _, p := range []struct {
		name string
		mk   func(*testing.T) faultBroker
	}{{"nats", faultNATS}, {"kafka", faultKafka}, {"redis", func(t *testing.T) faultBroker { return faultRedis(t, d.redis.Addr) }}} {
		t.Run(p.name, func(t *testing.T) { runFault(t, d, img, p.mk(t)) })
	}
}

func runFault(t *testing.T, d *dispEnv, img string, b faultBroker) {
	e, ns := d.e, d.ns
	name := "fault-" + b.provider
	ledger := ns + ":" + b.provider
	e.Apply(t, ns, poolManifest(name, name+"-llm", img, 3, "--redis="+d.redis.Addr, "--ledger="+ledger, "--latency=150ms")+fmt.Sprintf(`---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: %[1]s}
spec:
  type: queue
  agentPoolRef: {name: %[1]s}
  queueConfig:
    provider: %[2]s
    queueName: %[3]s
    prefetchCount: 8
    dispatch: {responseQueue: results, deadLetterQueue: dead, maxRetries: 5, initialBackoff: 200ms, maxBackoff: 2s, timeout: 20s}
`, name, b.provider, b.queueName))
	t.Cleanup(func() {
		_, _ = e.KubectlErr("-n", ns, "delete", "toolbinding/"+name, "agentpool/"+name, "agentclass/"+name, "--wait=false")
	})
	guardPoolReady(t, e, ns, name, 3)
	procs := map[string]*dispProc{}
	for _, m := range []string{"d-a", "d-b"} {
		procs[m] = startDispatcher(t, e, ns, d.gw.api, d.redis.Addr, m+"-"+b.provider, b.flag...)
	}
	waitBindingCondition(t, e, ns, name, "Ready", "True", 90*time.Second)
	for i := 0; i < faultMessages; i++ {
		b.produce(t, i)
	}
	start := time.Now()
	count := func() int { return len(b.ids(t, "results")) + len(b.ids(t, "dead")) }
	// Progress is read from the agents' ledger (cheap for every provider; reading a Kafka topic
	// back takes seconds), so that the kills land at a fifth for each of them.
	lc := redis.NewClient(&redis.Options{Addr: d.redis.Addr})
	defer lc.Close()
	Eventually(t, 5*time.Minute, "a fifth of the messages processed", func() (bool, error) {
		n, err := lc.HLen(context.Background(), ledger+":done").Result()
		return n >= faultMessages/5, fmt.Errorf("%d processed (%v)", n, err)
	})
	killed := procs["d-a"]
	killed.kill()
	killAt := time.Now()
	pods := poolPods(t, e, ns, name)["serving"]
	victim := pods[0].Name
	zero := int64(0)
	if err := e.Kube.CoreV1().Pods(ns).Delete(context.Background(), victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	podAt := time.Now()
	t.Logf("[e2e] %s: SIGKILL of dispatcher %s (%s) and deletion of agent pod %s (%s) after %s", b.provider, killed.member, killAt.Format(stampMilli),
		victim, podAt.Format(stampMilli), killAt.Sub(start).Round(time.Millisecond))
	Eventually(t, 12*time.Minute, "every message answered or dead-lettered", func() (bool, error) {
		n := count()
		return n >= faultMessages, fmt.Errorf("%d of %d done", n, faultMessages)
	})
	took := time.Since(start)
	time.Sleep(3 * time.Second) // a late duplicate would show now
	results, dead := b.ids(t, "results"), b.ids(t, "dead")
	perResult, perDead := tally(results), tally(dead)
	for i := 0; i < faultMessages; i++ {
		id := fmt.Sprintf("m-%05d", i)
		if perResult[id]+perDead[id] != 1 {
			t.Errorf("%s: %d results and %d dead letters, want exactly one of them", id, perResult[id], perDead[id])
		}
	}
	if len(results)+len(dead) != faultMessages {
		t.Errorf("%d results + %d dead letters for %d messages", len(results), len(dead), faultMessages)
	}
	cut, doubled := checkLedger(t, d, ledger, perResult, killed.member, victim, killAt, podAt)
	t.Logf("[e2e] %s: %d messages in %s (%.0f/s): %d results, %d dead letters, 0 doubled results; %d messages completed twice by agents, every one cut off by a kill (%d for the killed replica, %d on the killed pod)",
		b.provider, faultMessages, took.Round(time.Second), float64(faultMessages)/took.Seconds(), len(results), len(dead), doubled, cut[0], cut[1])
}

func tally(ids []string) map[string]int {
	m := map[string]int{}
	for _, id := range ids {
		m[id]++
	}
	return m
}

// completion is one ledger line: an agent finished a message.
type completion struct {
	pod, member string
	at          time.Time
}

const stampMilli = "15:04:05.000"

func fmtCompletions(cs []completion) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s on %s for %s", c.at.Format(stampMilli), c.pod, c.member)
	}
	return b.String()
}

// checkLedger checks the agents' ledger: a message with a result completed more than once must
// have every completion but the last cut off by a kill: done for the killed dispatcher replica
// or on the killed pod, from 3 s before that kill (completed, its outcome not yet stored) to
// 1 s after it (the request was in flight when the kill came and the cancellation had not yet
// reached the agent). It returns those counts by cause and the
// number of messages completed more than once.
func checkLedger(t *testing.T, d *dispEnv, ledger string, perResult map[string]int, killedMember, victim string, killAt, podAt time.Time) ([2]int, int) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: d.redis.Addr})
	defer rc.Close()
	log, err := rc.LRange(context.Background(), ledger+":log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]completion{}
	for _, line := range log {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("ledger line %q", line)
		}
		ms, _ := strconv.ParseInt(f[3], 10, 64)
		byID[f[0]] = append(byID[f[0]], completion{pod: f[1], member: f[2], at: time.UnixMilli(ms)})
	}
	var cut [2]int
	doubled := 0
	var ids []string
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		cs := byID[id]
		if len(cs) < 2 || perResult[id] == 0 {
			continue
		}
		doubled++
		for _, c := range cs[:len(cs)-1] {
			switch {
			case c.member == killedMember && c.at.After(killAt.Add(-3*time.Second)) && !c.at.After(killAt.Add(time.Second)):
				cut[0]++
			case c.pod == victim && c.at.After(podAt.Add(-3*time.Second)) && !c.at.After(podAt.Add(time.Second)):
				cut[1]++
			default:
				t.Errorf("%s was processed again after a completion not cut off by a kill (replica %s killed at %s, pod %s deleted at %s): %s",
					id, killedMember, killAt.Format(stampMilli), victim, podAt.Format(stampMilli), fmtCompletions(cs))
			}
		}
	}
	return cut, doubled
}
