// Package dispatcher is the root of the ToolBinding dispatcher (cmd/dispatcher): queue consumers
// that feed AgentPools through the gateway and the tool proxy for http/grpc tool bindings.
//
// One package per concern:
//   - backoff: the retry schedule (exponential with full jitter, pure);
//   - queue: the provider-neutral message and consumer interfaces, with natsq (JetStream),
//     kafkaq (Kafka consumer groups, franz-go) and redisq (Redis Streams consumer groups);
//   - dedupe: the per-message record in Redis (lease, attempts, stored outcome, done marker);
//   - gwclient: the gateway's OpenAI API as a client;
//   - worker: the per-message pipeline (dedupe, call, publish, acknowledge, retry, dead letter);
//   - binding: the Kubernetes side (ToolBinding watch, pools, status conditions and counters);
//   - toolproxy: schema checks, authorization, idempotency, timeout and audit of tool calls;
//   - metrics: the Prometheus metrics.
//
// The dispatcher calls the gateway over HTTP like any client and never imports its code.
package dispatcher
