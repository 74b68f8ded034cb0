package server

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

func TestGRPCSessions(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	f := newFixture(t, rs.Addr, "team-g", store.Options{MaxSize: 2048})
	gs := grpc.NewServer()
	gs.RegisterService(&ServiceDesc, New(f.store, nil, nil, nil).GRPC())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c := NewSessionsClient(cc)
	ctx := context.Background()

	w, err := c.Put(ctx, &PutRequest{ConversationID: "g1", Data: json.RawMessage(`{"turns":[]}`), TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	stale, zero := w.Version+50, int64(0)
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"append", func() error {
			_, err := c.Append(ctx, &AppendRequest{ConversationID: "g1", Turn: json.RawMessage(`{"role":"user","content":"q"}`)})
			return err
		}, codes.OK},
		{"get", func() error {
			s, err := c.Get(ctx, &GetRequest{ConversationID: "g1"})
			if err == nil && !strings.Contains(string(s.Data), `"content":"q"`) {
				t.Errorf("data = %s", s.Data)
			}
			return err
		}, codes.OK},
		{"cas conflict", func() error {
			_, err := c.Put(ctx, &PutRequest{ConversationID: "g1", Data: json.RawMessage(`{}`), IfVersion: &stale})
			return err
		}, codes.Aborted},
		{"create-only conflict", func() error {
			_, err := c.Put(ctx, &PutRequest{ConversationID: "g1", Data: json.RawMessage(`{}`), IfVersion: &zero})
			return err
		}, codes.Aborted},
		{"bad id", func() error { _, err := c.Get(ctx, &GetRequest{ConversationID: "x/y"}); return err }, codes.InvalidArgument},
		{"not object", func() error {
			_, err := c.Put(ctx, &PutRequest{ConversationID: "g2", Data: json.RawMessage(`7`)})
			return err
		}, codes.InvalidArgument},
		{"too large", func() error {
			_, err := c.Put(ctx, &PutRequest{ConversationID: "g2", Data: json.RawMessage(`{"a":"` + strings.Repeat("z", 3000) + `"}`)})
			return err
		}, codes.ResourceExhausted},
		{"missing", func() error { _, err := c.Get(ctx, &GetRequest{ConversationID: "none"}); return err }, codes.NotFound},
		{"delete", func() error { _, err := c.Delete(ctx, &DeleteRequest{ConversationID: "g1"}); return err }, codes.OK},
		{"unavailable", func() error {
			rs.Kill()
			_, err := c.Get(ctx, &GetRequest{ConversationID: "g1"})
			return err
		}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(tc.call()); got != tc.want {
				t.Fatalf("code = %v, want %v", got, tc.want)
			}
		})
	}
}
