// Package scaleloop is the autoscaler's runtime loop: it collects the
// token-aware metrics of agent pools (direct scrapes of the serving pods'
// /metrics, the Prometheus HTTP API, NATS JetStream lag), runs the pure
// decision package controller/scalepolicy on them
// in a controller-runtime loop, writes AgentPool spec.replicas through the scale
// subresource, and records an Event and metrics for every decision.
package scaleloop

// Metric names read from the agent pods. For each seed metric the first name
// found in a pod's exposition is used, in this order (neuronetes_* first, then
// vLLM, then SGLang).
var (
	// queueDepthNames are gauges of waiting requests.
	queueDepthNames = []string{"neuronetes_queue_depth", "vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	// tokensInQueueNames are gauges of waiting prompt tokens.
	tokensInQueueNames = []string{"neuronetes_tokens_in_queue"}
	// sessionNames are gauges of active sessions; vLLM/SGLang running requests stand in.
	sessionNames = []string{"neuronetes_concurrent_sessions", "vllm:num_requests_running", "sglang:num_running_reqs"}
	// ttftNames are TTFT histograms in seconds.
	ttftNames = []string{"neuronetes_ttft_seconds", "vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"}
	// prefillNames are histograms of each request's prefill time in seconds,
	// observed with its first token: the adaptive policy counts only the
	// misses caused by waiting (scalepolicy.TTFTCounts.WithPrefill).
	prefillNames = []string{"neuronetes_prefill_seconds", "vllm:request_prefill_time_seconds"}
	// tokenCounterNames are token counters whose summed rate is tokens/s
	// (neuronetes_tokens_total alone, or vLLM's prompt plus generation counters).
	tokenCounterNames = [][]string{
		{"neuronetes_tokens_total"},
		{"vllm:prompt_tokens_total", "vllm:generation_tokens_total"},
		{"sglang:prompt_tokens_total", "sglang:generation_tokens_total"},
	}
	// promptTokenNames are prompt-token counters: with the prefill-time
	// histogram's sum they give one replica's prefill rate, which the
	// learned capacity model (scalepolicy.CapacityModel) learns.
	promptTokenNames = []string{"vllm:prompt_tokens_total", "sglang:prompt_tokens_total"}
	// tokenGaugeNames are throughput gauges used when no counter is exported.
	tokenGaugeNames = []string{"neuronetes_tokens_per_second", "sglang:gen_throughput"}
	// toolNames are tool-call latency histograms; their count rate is the tool call rate.
	toolNames = []string{"neuronetes_tool_latency_seconds"}
)
