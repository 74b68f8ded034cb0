package front

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	gatewayv1 "github.com/neuronetes/neuronetes/gateway/api/v1"
)

type fakeStream struct {
	grpc.ServerStream
	sent []*gatewayv1.CompletionChunk
}

func (f *fakeStream) Send(c *gatewayv1.CompletionChunk) error { f.sent = append(f.sent, c); return nil }
func (f *fakeStream) SendHeader(metadata.MD) error            { return nil }
func (f *fakeStream) Context() context.Context                { return context.Background() }

// A data event that is not a JSON chunk is passed on in json as it came; the stream goes on.
func TestGRPCSinkPassesNonJSONEvents(t *testing.T) {
	f := &fakeStream{}
	s := &grpcSink{st: f}
	for _, ev := range []string{`{"id":"c1","choices":[{"index":0,"delta":{"content":"a"}}]}`, "keepalive", `{"id":"c2","choices":[]}`} {
		if err := s.Event([]byte(ev)); err != nil {
			t.Fatalf("event %q ended the stream: %v", ev, err)
		}
	}
	if len(f.sent) != 3 || f.sent[0].Id != "c1" || string(f.sent[1].Json) != "keepalive" || f.sent[1].Id != "" || f.sent[2].Id != "c2" {
		t.Fatalf("sent %v", f.sent)
	}
}
