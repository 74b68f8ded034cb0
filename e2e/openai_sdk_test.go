package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/e2e/images"
)

// The OpenAI SDK suite's keys; each Tenant names its own Secret.
const (
	sdkKeyMain  = "sk-e2e-sdk-main-7c1f40"
	sdkKeyOther = "sk-e2e-sdk-other-2b9d11"
	sdkKeyQuota = "sk-e2e-sdk-quota-5e3a08"
)

// sdkObjects: an AgentRollout over the two sdkPool pools of model sdk-llm (sdk-v1 stable, sdk-v2
// receiving a shadow copy of every request at weight 0, mirror 100), a GuardrailPolicy that redacts
// e-mail addresses and blocks card numbers in requests, and three tenants: main (sdk-llm, one
// request at a time, so an abort that leaked its lease would refuse the next), other (another
// model only) and quota (a token bucket two requests overflow).
const sdkObjects = `
apiVersion: v1
kind: Secret
metadata: {name: sdk-main-keys, labels: {neuronetes.io/api-keys: "true"}}
stringData: {k: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sdk-other-keys, labels: {neuronetes.io/api-keys: "true"}}
stringData: {k: %[2]s}
---
apiVersion: v1
kind: Secret
metadata: {name: sdk-quota-keys, labels: {neuronetes.io/api-keys: "true"}}
stringData: {k: %[3]s}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: sdk-main}
spec:
  apiKeys: [{secretName: sdk-main-keys}]
  models: [sdk-llm]
  quota: {maxConcurrent: 1}
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: sdk-other}
spec:
  apiKeys: [{secretName: sdk-other-keys}]
  models: [sdk-other-llm]
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: sdk-quota}
spec:
  apiKeys: [{secretName: sdk-quota-keys}]
  models: [sdk-llm]
  quota: {tokensPerMinute: 300}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentRollout
metadata: {name: sdk}
spec:
  stablePool: {name: sdk-v1}
  canaryPool: {name: sdk-v2}
  steps:
    - {weight: 0, mirror: 100, pause: 1h}
---
apiVersion: neuronetes.io/v1alpha1
kind: GuardrailPolicy
metadata: {name: sdk-guardrails}
spec:
  targetRef: {kind: AgentPool, name: sdk-v1}
  request:
    - name: block-cards
      type: pii
      action: block
      pii: {entities: [CREDIT_CARD]}
    - name: redact-email
      type: pii
      action: redact
      pii: {entities: [EMAIL_ADDRESS]}
`

// sdkPool is one pool of model sdk-llm and its class, both named %[1]s: the demo agent (image
// %[2]s) with a restricted securityContext (%[3]s).
const sdkPool = `---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: %[1]s}
spec:
  modelRef: {name: sdk-llm}
  sidecar: {inject: false}
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: agent
          image: %[2]s
          imagePullPolicy: Never
          securityContext: %[3]s
          args: ["--listen=:8000", "--model=sdk-llm", "--token-rate=200", "--default-max-tokens=8"]
          ports: [{name: http, containerPort: 8000}]
          readinessProbe:
            httpGet: {path: /readyz, port: 8000}
            periodSeconds: 1
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: %[1]s}
spec:
  agentClassRef: {name: %[1]s}
  replicas: 1
  minReplicas: 1
  maxReplicas: 1
`

// deployOpenAISDK drives the chart-installed gateway with the official OpenAI Go SDK, as a user's
// agent would: every call below goes through the SDK's own encoding and error handling.
func deployOpenAISDK(t *testing.T, e *Env, r *deployRelease) {
	ns := r.exampleNS
	img := e.Image(t, "demo-agent", "./cmd/demo-agent")
	manifest := fmt.Sprintf(sdkObjects, sdkKeyMain, sdkKeyOther, sdkKeyQuota)
	for _, name := range []string{"sdk-v1", "sdk-v2"} {
		manifest += fmt.Sprintf(sdkPool, name, img, images.RestrictedSecurityContext)
	}
	e.Apply(t, ns, manifest)
	guardPoolReady(t, e, ns, "sdk-v1", 1)
	guardPoolReady(t, e, ns, "sdk-v2", 1)
	svc, err := e.Kube.CoreV1().Services(r.namespace).Get(context.Background(), r.name+"-neuronetes-gateway", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/v1/"
	client := func(key string) openai.Client {
		return openai.NewClient(option.WithBaseURL(base), option.WithAPIKey(key), option.WithMaxRetries(0),
			option.WithRequestTimeout(60*time.Second))
	}
	main := client(sdkKeyMain)
	Eventually(t, time.Minute, "the gateway serves sdk-llm to the main tenant", func() (bool, error) {
		p, err := main.Models.List(context.Background())
		if err != nil {
			return false, err
		}
		for _, m := range p.Data {
			if m.ID == "sdk-llm" {
				return true, nil
			}
		}
		return false, fmt.Errorf("models %v", p.Data)
	})
	t.Run("ChatAndStreamWithUsage", func(t *testing.T) { sdkChat(t, main) })
	t.Run("ToolConversationWithRedactionAndShadow", func(t *testing.T) { sdkToolConversation(t, main) })
	t.Run("CompletionsPromptArray", func(t *testing.T) { sdkCompletions(t, main) })
	t.Run("Embeddings", func(t *testing.T) { sdkEmbeddings(t, main) })
	t.Run("AbortMidStream", func(t *testing.T) { sdkAbort(t, main) })
	t.Run("Errors", func(t *testing.T) { sdkErrors(t, main, client(sdkKeyOther), client("sk-nobody"), client(sdkKeyQuota)) })
	t.Run("BlockedContentIsContentFilter", func(t *testing.T) { sdkBlocked(t, main) })
}

func sdkChat(t *testing.T, c openai.Client) {
	ctx := context.Background()
	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens <= 0 || resp.Usage.PromptTokens <= 0 {
		t.Fatalf("completion %s", resp.RawJSON())
	}
	s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(6),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Count to five.")}})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for s.Next() {
		acc.AddChunk(s.Current())
		chunks++
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 2 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens <= 0 || acc.Usage.TotalTokens != acc.Usage.PromptTokens+acc.Usage.CompletionTokens {
		t.Fatalf("%d chunks, accumulated %+v usage %+v", chunks, acc.Choices, acc.Usage)
	}
}

// sdkToolConversation: the agent is made to call a tool (a named tool_choice), the SDK's own
// conversion of that assistant message and a tool message go back with an e-mail address the
// guardrail redacts, while every request is also mirrored to the canary. The demo agent refuses
// a tool conversation that lost tool_call_id, an id, a type or a function name (as vLLM does), so
// an answer proves the tool fields reached it.
func sdkToolConversation(t *testing.T, c openai.Client) {
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "lookup_customer", Description: openai.String("Find a customer by e-mail"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"email": map[string]any{"type": "string"}}, "required": []string{"email"}},
	})}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Look up the customer ada@example.com please.")}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sdk-llm", Messages: msgs, Tools: tools,
		ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "lookup_customer"})})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Choices) != 1 || len(first.Choices[0].Message.ToolCalls) != 1 || first.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("want one tool call, got %s", first.RawJSON())
	}
	call := first.Choices[0].Message.ToolCalls[0]
	if call.ID == "" || call.Function.Name != "lookup_customer" {
		t.Fatalf("tool call %s", call.RawJSON())
	}
	msgs = append(msgs, first.Choices[0].Message.ToParam(),
		openai.ToolMessage(`{"customer":"Ada","email":"ada@example.com","tier":"gold"}`, call.ID))
	second, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sdk-llm", Messages: msgs, Tools: tools})
	if err != nil {
		t.Fatalf("the tool conversation was refused (a tool field was lost on the way): %v", err)
	}
	if len(second.Choices) != 1 || second.Choices[0].Message.Content == "" || len(second.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("answer to the tool result %s", second.RawJSON())
	}
}

func sdkCompletions(t *testing.T, c openai.Client) {
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(4),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"The first part, ", "and the second."}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) == 0 || resp.Choices[0].Text == "" || resp.Usage.PromptTokens <= 0 {
		t.Fatalf("completion %s", resp.RawJSON())
	}
}

func sdkEmbeddings(t *testing.T, c openai.Client) {
	resp, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "sdk-llm",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a refund policy", "shipping times"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || len(resp.Data[0].Embedding) == 0 || len(resp.Data[0].Embedding) != len(resp.Data[1].Embedding) || resp.Usage.PromptTokens <= 0 {
		t.Fatalf("embeddings: %d vectors, usage %+v", len(resp.Data), resp.Usage)
	}
}

// sdkAbort cancels a stream after its first chunk; the tenant (one request at a time) is served
// again at once, so nothing of the aborted request is held.
func sdkAbort(t *testing.T, c openai.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(200),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me a long story.")}})
	if !s.Next() {
		t.Fatalf("no first chunk: %v", s.Err())
	}
	cancel()
	for s.Next() {
	}
	if err := s.Err(); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("stream after the abort: %v, want context.Canceled", err)
	}
	_ = s.Close()
	Eventually(t, 10*time.Second, "the next request of the tenant after the abort", func() (bool, error) {
		_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(2),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return err == nil, err
	})
}

// apiError returns the SDK's error, failing the test for anything else.
func apiError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("err %v (%T), want an *openai.Error", err, err)
	}
	return ae
}

func sdkErrors(t *testing.T, main, other, nobody, quota openai.Client) {
	ctx := context.Background()
	chat := func(c openai.Client, model string, maxTokens int64) error {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(maxTokens),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return err
	}
	if ae := apiError(t, chat(nobody, "sdk-llm", 2)); ae.StatusCode != 401 {
		t.Errorf("bad key: %d %s, want 401 (AuthenticationError)", ae.StatusCode, ae.Code)
	}
	unknown := apiError(t, chat(main, "sdk-nope", 2))
	forbidden := apiError(t, chat(other, "sdk-llm", 2))
	for name, ae := range map[string]*openai.Error{"unknown model": unknown, "forbidden model": forbidden} {
		if ae.StatusCode != 404 || ae.Code != "model_not_found" || ae.Param != "model" {
			t.Errorf("%s: %d code %q param %q, want 404 model_not_found naming model", name, ae.StatusCode, ae.Code, ae.Param)
		}
	}
	if strings.Replace(unknown.Message, "sdk-nope", "sdk-llm", 1) != forbidden.Message {
		t.Errorf("the forbidden model's message %q differs from a missing one's %q: existence leaks", forbidden.Message, unknown.Message)
	}
	// 300 tokens a minute: a request takes its prompt estimate plus max_tokens, so the second
	// of these is refused.
	var refused *openai.Error
	for i := 0; i < 3 && refused == nil; i++ {
		if err := chat(quota, "sdk-llm", 200); err != nil {
			refused = apiError(t, err)
		}
	}
	if refused == nil || refused.StatusCode != 429 || refused.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("quota: %v, want 429 with Retry-After", refused)
	}
}

// sdkBlocked: a request the guardrail blocks is answered as OpenAI answers a filtered one, 200
// with finish_reason content_filter, so the SDK returns it without an error.
func sdkBlocked(t *testing.T, c openai.Client) {
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "sdk-llm", MaxTokens: openai.Int(4),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Charge my card 4111 1111 1111 1111 today.")}})
	if err != nil {
		t.Fatalf("a blocked request is an error for the SDK: %v", err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "content_filter" {
		t.Fatalf("blocked request answered %s", resp.RawJSON())
	}
}
