package front

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/neuronetes/neuronetes/gateway/api/v1"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// grpcService implements gatewayv1.InferenceServer on the engine.
type grpcService struct {
	gatewayv1.UnimplementedInferenceServer
	s *Server
}

func (g *grpcService) ChatCompletions(req *gatewayv1.CompletionRequest, st grpc.ServerStreamingServer[gatewayv1.CompletionChunk]) error {
	return g.serve(openai.RouteChat, req, st)
}

func (g *grpcService) Completions(req *gatewayv1.CompletionRequest, st grpc.ServerStreamingServer[gatewayv1.CompletionChunk]) error {
	return g.serve(openai.RouteCompletions, req, st)
}

func (g *grpcService) serve(route openai.Route, req *gatewayv1.CompletionRequest, st grpc.ServerStreamingServer[gatewayv1.CompletionChunk]) error {
	ctx := st.Context()
	h := headerOf(ctx)
	t, aerr := g.s.Engine.Authenticate(ctx, h)
	if aerr != nil {
		return grpcError(st, aerr)
	}
	body, err := requestJSON(route, req)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "extra_json: %v", err)
	}
	sink := &grpcSink{st: st}
	g.s.Engine.Handle(ctx, engine.Inbound{Route: route, Header: h, Body: body, Protocol: "grpc", Tenant: t}, sink)
	return sink.err
}

// headerOf turns call metadata into an http.Header.
func headerOf(ctx context.Context) http.Header {
	h := http.Header{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin") {
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// requestJSON builds the OpenAI body of a gRPC request.
func requestJSON(route openai.Route, r *gatewayv1.CompletionRequest) ([]byte, error) {
	m := map[string]any{}
	if len(r.ExtraJson) > 0 {
		if err := json.Unmarshal(r.ExtraJson, &m); err != nil {
			return nil, err
		}
	}
	m["model"] = r.Model
	if route == openai.RouteChat {
		msgs := make([]map[string]string, len(r.Messages))
		for i, msg := range r.Messages {
			msgs[i] = map[string]string{"role": msg.Role, "content": msg.Content}
		}
		m["messages"] = msgs
	} else {
		m["prompt"] = r.Prompt
	}
	if r.MaxTokens != nil {
		m["max_tokens"] = *r.MaxTokens
	}
	if r.Temperature != nil {
		m["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		m["top_p"] = *r.TopP
	}
	if len(r.Stop) > 0 {
		m["stop"] = r.Stop
	}
	if r.User != "" {
		m["user"] = r.User
	}
	if r.ConversationId != "" {
		m["conversation_id"] = r.ConversationId
	}
	if len(r.Metadata) > 0 {
		m["metadata"] = r.Metadata
	}
	m["stream"] = r.Stream
	if r.IncludeUsage {
		m["stream_options"] = map[string]bool{"include_usage": true}
	}
	return json.Marshal(m)
}

// grpcSink sends chunks as CompletionChunk messages.
type grpcSink struct {
	st      grpc.ServerStreamingServer[gatewayv1.CompletionChunk]
	err     error
	started bool
}

func (s *grpcSink) header(m engine.Meta) error {
	if s.started {
		return nil
	}
	s.started = true
	md := metadata.MD{}
	for k, v := range map[string]string{"x-request-id": m.RequestID, "x-neuronetes-pool": m.Pool,
		"x-neuronetes-pod": m.Pod, "x-neuronetes-pin": m.Pin, "x-neuronetes-gateway": m.Gateway} {
		if v != "" {
			md.Set(k, v)
		}
	}
	return s.st.SendHeader(md)
}

func (s *grpcSink) Start(m engine.Meta) error { return s.header(m) }

// Event sends one chunk. An event that is not a JSON chunk (a model server's own event) is sent
// as it came, in json only, rather than ending the stream.
func (s *grpcSink) Event(data []byte) error {
	c, err := chunkProto(data)
	if err != nil {
		c = &gatewayv1.CompletionChunk{Json: append([]byte(nil), data...)}
	}
	return s.st.Send(c)
}

func (s *grpcSink) Finish() error { return nil }

func (s *grpcSink) Response(m engine.Meta, body []byte) error {
	if err := s.header(m); err != nil {
		return err
	}
	return s.Event(body)
}

func (s *grpcSink) Fail(m engine.Meta, e *openai.Error, started bool) error {
	if !started && m.RequestID != "" {
		s.st.SetHeader(metadata.Pairs("x-request-id", m.RequestID))
	}
	s.err = grpcError(s.st, e)
	return nil
}

// chunkProto converts a chunk (or a whole response) into its message.
func chunkProto(data []byte) (*gatewayv1.CompletionChunk, error) {
	c, err := openai.ParseChunk(data)
	if err != nil {
		return nil, err
	}
	out := &gatewayv1.CompletionChunk{Id: c.ID, Model: c.Model, Created: c.Created, Json: append([]byte(nil), data...)}
	for _, ch := range c.Choices {
		pc := &gatewayv1.Choice{Index: int32(ch.Index), Content: ch.Content()}
		if d := ch.Delta; d != nil {
			pc.Role, pc.ToolCallsJson = d.Role, d.ToolCalls
		} else if d := ch.Message; d != nil {
			pc.Role, pc.ToolCallsJson = d.Role, d.ToolCalls
		}
		if ch.FinishReason != nil {
			pc.FinishReason = *ch.FinishReason
		}
		out.Choices = append(out.Choices, pc)
	}
	if u := c.Usage; u != nil {
		out.Usage = &gatewayv1.Usage{PromptTokens: int32(u.PromptTokens), CompletionTokens: int32(u.CompletionTokens), TotalTokens: int32(u.TotalTokens)}
	}
	return out, nil
}

// grpcError maps an API error to a status; Retry-After goes to the trailer.
func grpcError(st grpc.ServerStream, e *openai.Error) error {
	if e.RetryAfter > 0 {
		st.SetTrailer(metadata.Pairs("retry-after", strconv.Itoa(openai.RetryAfterSeconds(e.RetryAfter))))
	}
	return status.Error(grpcCode(e.Status), string(e.JSON()))
}

func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusOK:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case 499:
		return codes.Canceled
	}
	return codes.Internal
}
