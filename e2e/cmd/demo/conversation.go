package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// conversation has a two-turn conversation with the demo pool through the gateway's Service,
// streamed, as the demo tenant. The conversation id is the session key: turn 2 stays on turn 1's
// pod (the pin holds) and its prompt includes turn 1, read from the sidecar's encrypted Redis
// session. It then reads the number the autoscaler takes from the gateway for the pool.
func (d *demo) conversation(ctx context.Context) error {
	pods, err := d.poolPods(ctx)
	if err != nil {
		return err
	}
	key, err := d.demoAPIKey(ctx)
	if err != nil {
		return fmt.Errorf("the demo tenant's API key: %w", err)
	}
	g, err := d.gateway(ctx)
	if err != nil {
		return err
	}
	if err := d.waitRoutes(ctx, g, key, len(pods["serving"])); err != nil {
		return err
	}
	d.gatewayURL = g.url
	d.results = append(d.results, fmt.Sprintf("gateway: Service %s (%d replicas); Tenant %s/%s with its API key in Secret %s",
		g.url, len(g.replicas), demoNamespace, demoTenant, demoKeySecret))

	d.conv = fmt.Sprintf("demo-%d", time.Now().UnixNano())
	var turns []turn
	for i, text := range []string{"plan a three day trip to Lisbon", "and what should I pack"} {
		t, err := chatStream(ctx, g.url, key, d.conv, text)
		if err != nil {
			return fmt.Errorf("turn %d through the gateway: %w", i+1, err)
		}
		if t.reply.Chunks < 2 {
			return fmt.Errorf("turn %d: %d content chunks, want a stream of several", i+1, t.reply.Chunks)
		}
		turns = append(turns, t)
	}
	t1, t2 := turns[0], turns[1]
	if t2.pod != t1.pod || t2.pin != "held" {
		return fmt.Errorf("turn 2 went to %s (pin %q) after turn 1 on %s: the session's pin did not hold", t2.pod, t2.pin, t1.pod)
	}
	// Turn 2's prompt is turn 1's (question), turn 1's answer and its own message.
	if u1, u2 := t1.reply.Usage, t2.reply.Usage; u2.ContextTokens <= u1.ContextTokens+u1.CompletionTokens {
		return fmt.Errorf("turn 2 on %s did not see turn 1's question and answer (context %d tokens; turn 1 had %d plus %d answered): the sidecar session was not read",
			t2.pod, u2.ContextTokens, u1.ContextTokens, u1.CompletionTokens)
	}
	d.results = append(d.results,
		fmt.Sprintf("conversation %s through the gateway, streamed (SSE), session key = conversation id:", d.conv),
		fmt.Sprintf("  turn 1 served by %s via %s: pin %s, %d chunks, first after %s, context %d tokens",
			t1.pod, t1.replica, t1.pin, t1.reply.Chunks, t1.ttft.Round(time.Millisecond), t1.reply.Usage.ContextTokens),
		fmt.Sprintf("  turn 2 served by %s via %s: pin %s, %d chunks, first after %s, context %d tokens (turn 1's question and answer from the sidecar's encrypted Redis session; %d of them in the pod's prefix cache)",
			t2.pod, t2.replica, t2.pin, t2.reply.Chunks, t2.ttft.Round(time.Millisecond), t2.reply.Usage.ContextTokens, t2.reply.Usage.cached()))
	return d.autoscalerSource(ctx, g)
}

// autoscalerSource checks that the controller's autoscaler reads the gateway (the chart passes
// --gateway-pods when gateway.enabled) and reports the concurrent sessions the gateway counts
// for the demo pool, the value the autoscaler's concurrent-sessions metric takes.
func (d *demo) autoscalerSource(ctx context.Context, g gatewayEndpoint) error {
	flag, err := d.controllerArg(ctx, "--gateway-pods=")
	if err != nil {
		return err
	}
	var sessions float64
	if err := waitFor(ctx, 20*time.Second, "the gateway counting the demo conversation's session", func() (bool, error) {
		var err error
		sessions, err = d.gatewaySessions(ctx, g)
		return err == nil && sessions >= 1, err
	}); err != nil {
		return err
	}
	d.results = append(d.results, fmt.Sprintf("autoscaler metric source: the gateway (controller --gateway-pods=%s); concurrent sessions of pool %s/demo (active in the last 5 min) as the gateway counts them: %g",
		flag, demoNamespace, sessions))
	return nil
}

// controllerArg returns the value of the controller container's argument with prefix.
func (d *demo) controllerArg(ctx context.Context, prefix string) (string, error) {
	deps, err := d.kube.AppsV1().Deployments(systemNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, dep := range deps.Items {
		for _, c := range dep.Spec.Template.Spec.Containers {
			if c.Name != "controller" {
				continue
			}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, prefix); ok {
					return v, nil
				}
			}
			return "", fmt.Errorf("the controller (%s/%s) has no %s flag: the autoscaler does not read the gateway", systemNamespace, dep.Name, strings.TrimSuffix(prefix, "="))
		}
	}
	return "", fmt.Errorf("no controller Deployment in %s", systemNamespace)
}
