package server

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

func TestGRPCSessions(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	f := newFixture(t, rs.Addr, "team-g", store.Options{MaxSize: 2048})
	gs := grpc.NewServer()
	sidecarv1.RegisterSessionsServer(gs, New(f.store, nil, nil, nil).GRPC())
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
	c := sidecarv1.NewSessionsClient(cc) // the generated protobuf client
	ctx := context.Background()

	w, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g1", Data: []byte(`{"turns":[]}`), TtlSeconds: 60})
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
			_, err := c.Append(ctx, &sidecarv1.AppendRequest{ConversationId: "g1", Turn: []byte(`{"role":"user","content":"q"}`)})
			return err
		}, codes.OK},
		{"get", func() error {
			s, err := c.Get(ctx, &sidecarv1.GetRequest{ConversationId: "g1"})
			if err == nil && !strings.Contains(string(s.Data), `"content":"q"`) {
				t.Errorf("data = %s", s.Data)
			}
			return err
		}, codes.OK},
		{"cas conflict", func() error {
			_, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g1", Data: []byte(`{}`), IfVersion: &stale})
			return err
		}, codes.Aborted},
		{"create-only conflict", func() error {
			_, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g1", Data: []byte(`{}`), IfVersion: &zero})
			return err
		}, codes.Aborted},
		{"negative if_version", func() error {
			neg := int64(-2)
			_, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g1", Data: []byte(`{}`), IfVersion: &neg})
			return err
		}, codes.InvalidArgument},
		{"delete conflict", func() error {
			_, err := c.Delete(ctx, &sidecarv1.DeleteRequest{ConversationId: "g1", IfVersion: &stale})
			return err
		}, codes.Aborted},
		{"bad id", func() error { _, err := c.Get(ctx, &sidecarv1.GetRequest{ConversationId: "x/y"}); return err }, codes.InvalidArgument},
		{"not object", func() error {
			_, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g2", Data: []byte(`7`)})
			return err
		}, codes.InvalidArgument},
		{"too large", func() error {
			_, err := c.Put(ctx, &sidecarv1.PutRequest{ConversationId: "g2", Data: []byte(`{"a":"` + strings.Repeat("z", 3000) + `"}`)})
			return err
		}, codes.ResourceExhausted},
		{"missing", func() error { _, err := c.Get(ctx, &sidecarv1.GetRequest{ConversationId: "none"}); return err }, codes.NotFound},
		{"delete", func() error { _, err := c.Delete(ctx, &sidecarv1.DeleteRequest{ConversationId: "g1"}); return err }, codes.OK},
		{"unavailable", func() error {
			rs.Kill()
			_, err := c.Get(ctx, &sidecarv1.GetRequest{ConversationId: "g1"})
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
